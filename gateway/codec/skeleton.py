"""Where each value of a JSON object sits in its bytes, and under which keys: what a stream's text
template (gateway.codec.textchunks) is cut from.

A value here is a string, a number, `true`, `false` or `null`, or an array that holds nothing but
those (a list of log probabilities, token ids: one value, whatever its length). Its path is the
keys from the top joined by dots, array positions left out (`choices.delta.content`). Learning
a template reads a payload this way once or twice a stream; a server's events of one kind share
their keys and structure from stream to stream, so the paths of each structure seen are kept
(a few), and a payload of a known structure is only cut at its values.
"""

import re
from typing import NamedTuple

# One token: a string, a number or literal, a bracket or separator, each after any white space.
_STRING = rb'"[^"\\\n\r]*(?:\\.[^"\\\n\r]*)*"'  # unrolled: no alternation per character
_TOKEN = re.compile(rb"[ \t\r\n]*(?:(" + _STRING + rb")|(-?[0-9][0-9.eE+-]*|true|false|null)|([{}\[\]:,]))")


# A key or a value: a payload cut at its values, without the scanner.
_SKELETON = re.compile(
    b"(" + _STRING + rb"[ \t]*:)|(\[[^\[\]{}\"]*\]|" + _STRING + rb"|-?[0-9][0-9.eE+-]*|true|false|null)"
)
_KNOWN: dict[bytes, tuple[str, ...]] = {}  # a structure (keys and brackets) -> its values' paths
_KEEP = 64


class Unit(NamedTuple):
    path: str
    start: int
    end: int


def _tokens(payload: bytes) -> list[tuple[int, int, int]] | None:
    """(kind, start, end): 1 a string, 2 a number or literal, 3 a bracket or separator; None when
    the bytes are not all tokens."""
    out: list[tuple[int, int, int]] = []
    at = 0
    size = len(payload.rstrip(b" \t\r\n"))
    while at < size:
        m = _TOKEN.match(payload, at)
        if m is None:
            return None
        kind = m.lastindex or 0
        out.append((kind, m.start(kind), m.end(kind)))
        at = m.end()
    return out


def units(payload: bytes) -> list[Unit] | None:
    """Every value of `payload` (a JSON object), in order; None when it is no object."""
    spans = [m.span(2) for m in _SKELETON.finditer(payload) if m.lastindex == 2]
    # The bytes between the values: the keys and the structure.
    starts = [b for _, b in spans]
    structure = b"\0".join(map(payload.__getitem__, map(slice, [0, *starts], [a for a, _ in spans] + [len(payload)])))
    paths = _KNOWN.get(structure)
    if paths is not None and len(paths) == len(spans):
        return [Unit(path, a, b) for path, (a, b) in zip(paths, spans, strict=True)]
    found = _scan(payload)
    # Kept only where the scanner and the cut agree on every value (an array of strings is one
    # value to the scanner, several to the cut: such a payload is scanned each time).
    if found is not None and [(u.start, u.end) for u in found] == spans:
        if len(_KNOWN) >= _KEEP:
            _KNOWN.clear()
        _KNOWN[structure] = tuple(u.path for u in found)
    return found


def _scan(payload: bytes) -> list[Unit] | None:
    tokens = _tokens(payload)
    if not tokens or payload[tokens[0][1]] != 0x7B:  # "{"
        return None
    out: list[Unit] = []
    keys: list[str] = []  # the key under which each open object's current value sits
    arrays: list[bool] = []  # for each open bracket: an array (True) or an object
    want_key = False
    i, n = 0, len(tokens)
    while i < n:
        kind, start, end = tokens[i]
        byte = payload[start]
        if kind == 3:
            if byte == 0x7B:  # {
                arrays.append(False)
                keys.append("")
                want_key = True
            elif byte == 0x5B:  # [
                flat = _flat_end(tokens, i, payload)
                if flat is not None:
                    out.append(Unit(_path(keys), start, tokens[flat][2]))
                    i = flat + 1
                    continue
                arrays.append(True)
            elif byte in (0x7D, 0x5D):  # } ]
                if not arrays:
                    return None
                if not arrays.pop():
                    keys.pop()
            elif byte == 0x2C:  # ,
                want_key = bool(arrays) and not arrays[-1]
        elif want_key:
            keys[-1] = payload[start + 1 : end - 1].decode("utf-8", "replace")
            want_key = False
        else:
            out.append(Unit(_path(keys), start, end))
        i += 1
    return out


def _path(keys: list[str]) -> str:
    return ".".join(keys)


def _flat_end(tokens: list[tuple[int, int, int]], i: int, payload: bytes) -> int | None:
    """Where the array opened at token `i` closes, when it holds values and commas only."""
    for j in range(i + 1, len(tokens)):
        kind, start, _ = tokens[j]
        if kind == 3:
            byte = payload[start]
            if byte == 0x5D:  # ]
                return j
            if byte != 0x2C:
                return None
    return None
