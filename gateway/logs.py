"""Logging: setup (JSON or text), the per-request access line, and secret redaction.

Secrets are the inbound API keys and every configured backend header value. They are registered
once per app and scrubbed from every record of the gateway's and aiohttp's loggers by a filter
on those loggers themselves (not on a handler), so whatever handler is attached (a console, a
file, pytest's caplog) only ever sees the redacted text. `Bearer <token>` is scrubbed anywhere,
registered or not. The access line carries ids, names, statuses, timings and token counts only:
never prompts, completions, query strings or header values.
"""

import asyncio
import logging
import sys
import threading
import time
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from gateway import jsonutil
from gateway.redact import REDACT

ACCESS = logging.getLogger("gateway.access")
# Loggers whose records are scrubbed: a filter on a logger covers records created on that very
# logger only (not its children), so each one is listed.
REDACTED_LOGGERS = (
    "gateway",
    "gateway.access",
    "gateway.upstream",
    "aiohttp.access",
    "aiohttp.client",
    "aiohttp.internal",
    "aiohttp.server",
    "aiohttp.web",
    "aiohttp.websocket",
    "asyncio",
)


class RedactingFilter(logging.Filter):
    """Renders the message (and any traceback) once, scrubbed, into the record itself."""

    _fmt = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except (TypeError, ValueError):
            msg = str(record.msg)
        record.msg = REDACT(msg)
        record.args = None
        if _malformed_request(record):
            # A client that sends something that is not HTTP is the client's problem, not an
            # error of the gateway's: one line at INFO, no traceback.
            assert record.exc_info is not None
            record.msg = REDACT(" ".join(f"{msg}: {record.exc_info[1]}".split()))
            record.exc_info = None
            record.levelno, record.levelname = logging.INFO, "INFO"
            return logging.getLogger(record.name).isEnabledFor(logging.INFO)
        if record.exc_info and not record.exc_text:
            record.exc_text = self._fmt.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = REDACT(record.exc_text)
        if record.stack_info:
            record.stack_info = REDACT(record.stack_info)
        access = getattr(record, "access", None)
        if isinstance(access, dict) and isinstance(access.get("path"), str):
            # The path is the one free text a client puts in an access line (the request id is
            # a checked token; the rest are config names, numbers and enums).
            record.access = {**access, "path": REDACT(access["path"])}
        return True


def _malformed_request(record: logging.LogRecord) -> bool:
    return (
        record.name == "aiohttp.server"
        and record.exc_info is not None
        and isinstance(record.exc_info[1], HttpProcessingError | RequestPayloadError)
    )


_FILTER = RedactingFilter()


def install_redaction() -> None:
    for name in REDACTED_LOGGERS:
        lg = logging.getLogger(name)
        if _FILTER not in lg.filters:
            lg.addFilter(_FILTER)


class JSONFormatter(logging.Formatter):
    """One JSON object per line; an access record's fields sit at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            obj.update(access)
        else:
            obj["msg"] = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            obj["exc"] = record.exc_text
        return jsonutil.dumps(obj).decode()


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class _Clock:
    """The timestamps of log lines, the part that changes once a second made once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._text = ""
        self._json = ""

    def stamps(self, now: float) -> tuple[str, str]:
        """`now` as the text formatter writes it (local time, `,mmm`) and as JSON does (UTC)."""
        second = int(now)
        if second != self._second:
            self._second = second
            self._text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
            self._json = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        ms = int((now - second) * 1000)
        return f"{self._text},{ms:03d}", f"{self._json}.{ms:03d}Z"


class GatewayHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `setup` installs. Records go through it as through any StreamHandler; access
    lines, one per request, come straight from `access_log` already formatted (the same text a
    record would make) and are written together once per turn of the event loop, not one write
    each. Any other record writes the access lines before it first, so the order stays."""

    def __init__(self, stream: Any, json_lines: bool) -> None:
        super().__init__(stream)
        self.json_lines = json_lines
        self.setFormatter(JSONFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
        self._pending: list[str] = []
        self._mutex = threading.Lock()  # other threads log too (offloaded work)
        self._flush_soon = False
        self._clock = _Clock()
        self._paths: dict[str, str] = {}

    def access(self, fields: dict[str, Any]) -> None:
        path = fields.get("path")
        if isinstance(path, str):
            # The one free text a client puts in an access line, scrubbed as the filter does.
            shown = self._paths.get(path)
            if shown is None:
                if len(self._paths) > 4096:
                    self._paths.clear()
                shown = self._paths[path] = REDACT(path)
            fields["path"] = shown
        text_ts, json_ts = self._clock.stamps(time.time())
        if self.json_lines:
            line = jsonutil.dumps({"ts": json_ts, "level": "info", "logger": ACCESS.name, **fields}).decode()
        else:
            line = f"{text_ts} INFO {ACCESS.name} {access_text(fields)}"
        with self._mutex:
            self._pending.append(line)
        if self._flush_soon:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.write_access()
            return
        self._flush_soon = True
        loop.call_soon(self.write_access)

    def write_access(self) -> None:
        self._flush_soon = False
        with self._mutex:
            lines, self._pending = self._pending, []
        if not lines:
            return
        self.acquire()  # the handler's own lock, as emit holds it
        try:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        except Exception:  # as Handler.emit does: logging never breaks the caller
            self.handleError(logging.makeLogRecord({"msg": "access lines", "name": ACCESS.name}))
        finally:
            self.release()

    def emit(self, record: logging.LogRecord) -> None:
        if self._pending:
            self.write_access()
        super().emit(record)


_ROOT = logging.getLogger()


def _fast_handler() -> GatewayHandler | None:
    """The handler access lines may go to directly: the root's only handler is `setup`'s and
    nothing else listens on the access logger (pytest's caplog, a handler of the user's)."""
    handlers = _ROOT.handlers
    if len(handlers) == 1 and not ACCESS.handlers and ACCESS.propagate:
        h = handlers[0]
        if type(h) is GatewayHandler:
            return h
    return None


def setup(fmt: str = "text", level: str = "info", stream: Any = None) -> None:
    """Point the root logger at one handler of the chosen format; install redaction."""
    handler = GatewayHandler(stream or sys.stderr, fmt == "json")
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
    install_redaction()


def access_text(fields: dict[str, Any]) -> str:
    """The text form of an access line: `key=value` pairs, absent values left out."""
    return " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)


def access_enabled() -> bool:
    return ACCESS.isEnabledFor(logging.INFO)


def access_log(fields: dict[str, Any]) -> None:
    if not ACCESS.isEnabledFor(logging.INFO):
        return
    fast = _fast_handler()
    if fast is not None:
        fast.access(fields)  # the same line a record would make, without making one
        return
    ACCESS.info("%s", access_text(fields), extra={"access": fields})
