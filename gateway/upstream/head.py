"""An answer's head: its bounds, and its header lines, read only when one is asked for.

llhttp (through httptools) finds the head well formed; what is read from it here is read from
the bytes it came in, not through a callback per header line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gateway.upstream.faults import BadAnswer

# Each header line, the number of lines, and all of it together.
MAX_HEADER_LINE = 8190
MAX_HEADERS = 100
MAX_HEAD = 64 * 1024


class Headers(Mapping[str, str]):
    """An answer's headers, by lower-case name (any case may be asked for), read from its head
    the first time one is asked for: most answers are read without a look at them. A name given
    more than once keeps its first value (no answer header the gateway reads repeats)."""

    __slots__ = ("_head", "_map")

    def __init__(self, head: bytes) -> None:
        self._head = head
        self._map: dict[str, str] | None = None

    def _lines(self) -> dict[str, str]:
        if self._map is None:
            self._map = header_lines(self._head)
        return self._map

    def get(self, name: str, default: Any = None) -> Any:
        head = self._head
        if self._map is None and head.find(b"\n ") < 0 and head.find(b"\n\t") < 0:
            # One header asked for (TGI's prompt count): its first line, found in the head. (A
            # folded line goes on the value of the line before it: the whole reading joins it.)
            low = head.lower()
            key = b"\n" + name.lower().encode("latin-1") + b":"
            at = low.find(key)
            if at < 0:
                return default
            end = low.find(b"\n", at + 1)
            if end >= 0:
                return head[at + len(key) : end].strip().decode("latin-1")
        return self._lines().get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._lines()[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._lines()

    def __iter__(self) -> Iterator[str]:
        return iter(self._lines())

    def __len__(self) -> int:
        return len(self._lines())


def final_head(data: bytes, interims: int) -> bytes:
    """The head of the final answer among the first bytes of a connection's answer: after the
    heads of `interims` interim answers, up to its blank line (whose CRLF llhttp may take as LF)."""
    start = end = 0
    for _ in range(interims + 1):
        start = end
        crlf, lf = data.find(b"\r\n\r\n", start), data.find(b"\n\n", start)
        end = crlf + 4 if crlf >= 0 and (lf < 0 or crlf < lf) else lf + 2
    return data[start:end].lstrip(b"\r\n")


def check_head(head: bytes) -> bytes:
    """The head in lower case; BadAnswer when it is larger than the client takes."""
    if len(head) > MAX_HEAD:
        raise BadAnswer(f"sent a head larger than {MAX_HEAD} bytes")
    lines = head.split(b"\n")
    if len(lines) > MAX_HEADERS + 3:  # the status line, and the blank line's two ends
        raise BadAnswer(f"sent more than {MAX_HEADERS} header lines")
    if max(map(len, lines)) > MAX_HEADER_LINE + 3:  # ": " is part of the bound; the CR is not
        raise BadAnswer(f"sent a header line longer than {MAX_HEADER_LINE} bytes")
    return head.lower()


def header_lines(head: bytes) -> dict[str, str]:
    """The header lines of a head llhttp found well formed."""
    headers: dict[str, str] = {}
    name = ""
    for line in head.split(b"\n")[1:]:
        line = line.rstrip(b"\r")
        if not line:
            continue
        if line[:1] in (b" ", b"\t"):  # an obsolete folded line goes on the value before it
            if name in headers:
                headers[name] = f"{headers[name]} {line.strip().decode('latin-1')}"
            continue
        raw, _, value = line.partition(b":")
        name = raw.decode("latin-1").lower()
        if name not in headers:
            headers[name] = value.strip().decode("latin-1")
    return headers
