"""Logging: setup (JSON or text), the per-request access line, and secret redaction.

Secrets are the inbound API keys and every configured backend header value. They are registered
once per app and scrubbed from every record of the gateway's and aiohttp's loggers by a filter
on those loggers themselves (not on a handler), so whatever handler is attached (a console, a
file, pytest's caplog) only ever sees the redacted text. `Bearer <token>` is scrubbed anywhere,
registered or not. The access line carries ids, names, statuses, timings and token counts only:
never prompts, completions, query strings or header values.
"""

import logging
import re
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from gateway import jsonutil

ACCESS = logging.getLogger("gateway.access")
REDACTED = "[REDACTED]"
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
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")
_MIN_SECRET = 4  # shorter values would scrub ordinary words


class Redactor:
    """The process-wide set of secret strings, and the substitution that hides them."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()

    def add(self, values: Iterable[str]) -> None:
        with self._lock:
            new = {v for v in values if len(v) >= _MIN_SECRET} - self._secrets
            if not new:
                return
            self._secrets |= new
            # Longest first, so a secret that contains another is hidden whole.
            ordered = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in ordered))

    def __call__(self, text: str) -> str:
        if self._pattern is not None:
            text = self._pattern.sub(REDACTED, text)
        return _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


REDACT = Redactor()


def secret_header_values(headers: dict[str, str]) -> list[str]:
    """Values of configured headers to hide: the whole value, and the token after a scheme."""
    out: list[str] = []
    for v in headers.values():
        out.append(v)
        scheme, _, token = v.partition(" ")
        if token and scheme.isalpha():
            out.append(token.strip())
    return out


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
