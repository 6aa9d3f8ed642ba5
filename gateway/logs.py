"""Logging: setup (JSON or text), the per-request access line, and secret redaction.

Secrets are the inbound API keys and every configured backend header value. They are registered
once per app and scrubbed from every record of the gateway's and aiohttp's loggers by a filter
on those loggers themselves (not on a handler), so whatever handler is attached (a console, a
file, pytest's caplog) only ever sees the redacted text. `Bearer <token>` is scrubbed anywhere,
registered or not. The access line carries ids, names, statuses, timings and token counts only:
never prompts, completions, query strings or header values.
"""

import logging
import sys
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


def setup(fmt: str = "text", level: str = "info", stream: Any = None) -> None:
    """Point the root logger at one handler of the chosen format; install redaction."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
    install_redaction()


def access_text(fields: dict[str, Any]) -> str:
    """The text form of an access line: `key=value` pairs, absent values left out."""
    return " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)


def access_log(fields: dict[str, Any]) -> None:
    if ACCESS.isEnabledFor(logging.INFO):
        ACCESS.info("%s", access_text(fields), extra={"access": fields})
