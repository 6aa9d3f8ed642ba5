"""Secret scrubbing: the process-wide set of known secrets, and what to hide in free text.

Known secrets are the inbound API keys and every configured backend header value, registered
when an app is built. Two kinds of text pass through here: log records (gateway.logs installs a
filter that calls `REDACT`) and backend-written text that may reach a client (an upstream error
message; `for_client`), which also loses anything shaped like a credential, since a backend may
echo a token the gateway never knew about.
"""

import re
import threading
from collections.abc import Iterable

REDACTED = "[REDACTED]"
_MIN_SECRET = 4  # shorter values would scrub ordinary words
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+")
# Shapes of credentials that a backend might echo: key=value pairs under telling names, and the
# well-known token formats (OpenAI-style sk-, Hugging Face hf_, Databricks dapi, AWS access keys,
# GitHub tokens, JWTs).
_CREDENTIAL = re.compile(
    r"(?i)(\b(?:api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|passwd|authorization)"
    r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&}]+"
    r"|\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}"
    r"|\bhf_[A-Za-z0-9]{20,}"
    r"|\bdapi[0-9a-f]{20,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"
)


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


def scrub(text: str) -> str:
    """Known secrets and credential-shaped strings hidden; the rest as it is (a backend's own
    error body, relayed whole to a client of its wire)."""
    return _CREDENTIAL.sub(lambda m: (m.group(1) or "") + REDACTED, REDACT(text))


def for_client(text: str) -> str:
    """Backend-written text made fit for a client's one line: control characters (line ends
    among them) flattened to spaces. (Secrets are hidden before, with `scrub`.)"""
    return "".join(c if c.isprintable() else " " for c in text)
