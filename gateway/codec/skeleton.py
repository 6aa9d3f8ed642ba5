"""Where each value of a JSON object sits in its bytes, and under which keys: what a stream's text
template (gateway.codec.textchunks) is cut from.

A value here is a string, a number, `true`, `false` or `null`, or an array that holds nothing but
those (a list of log probabilities, token ids: one value, whatever its length). Its path is the
keys from the top joined by dots, array positions left out (`choices.delta.content`). Only
learning a template reads a payload this way, a few times a stream, so plain Python will do.
"""

import re
from typing import NamedTuple

# One token: a string, a number or literal, a bracket or separator, each after any white space.
_TOKEN = re.compile(rb'[ \t\r\n]*(?:("(?:[^"\\\n\r]|\\.)*")|(-?[0-9][0-9.eE+-]*|true|false|null)|([{}\[\]:,]))')


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
