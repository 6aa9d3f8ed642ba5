"""One JSON value read a piece at a time: checked against JSON's grammar as it arrives, and
written out compacted (no whitespace outside strings), so a tool call's arguments can be passed
on while the model is still writing them.

The compacted text is the model's own JSON less its insignificant whitespace: strings, escapes
and numbers stay as written, so it loads to the same value. One leniency: a raw control
character inside a string (a model writing a line break into a code argument) is written out
escaped, where a strict JSON reader would refuse the whole value.
"""

from __future__ import annotations

import re

MORE, DONE, BAD = 0, 1, 2  # what `run` found: needs more text, the value is complete, not JSON

_WS = " \t\n\r"
# In a string, the characters that need a look: the closing quote, an escape, a control
# character, half of a surrogate pair (which no UTF-8 text can carry: it is written escaped).
_STRING_STOP = re.compile(r'["\\\x00-\x1f\ud800-\udfff]')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_SIMPLE_ESCAPES = frozenset('"\\/bfnrt')
_HEX = frozenset("0123456789abcdefABCDEF")
_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_WORDS = {"t": "true", "f": "false", "n": "null"}

# Where the reader is: expecting a value, a key or `}`, a key, a colon, a value or `]`, what
# follows a value, or inside a string.
_VALUE, _KEY_OR_END, _KEY, _COLON, _VALUE_OR_END, _AFTER, _STRING = range(7)


class JsonValue:
    """Reads one JSON value from a growing text; `out` collects its compacted pieces.

    `run(buf, i, final)` reads `buf` from `i` and returns where it stopped and what it found.
    On MORE it stopped at the first character it cannot judge yet (an escape, a number or a
    word cut short), which the caller keeps for the next call; on DONE it stopped right after
    the value; on BAD, at the offending character. `final` says no more text will come.
    """

    __slots__ = ("_after_string", "_stack", "_state", "out")

    def __init__(self) -> None:
        self.out: list[str] = []
        self._stack: list[str] = []
        self._state = _VALUE
        self._after_string = _AFTER

    def run(self, buf: str, i: int, final: bool) -> tuple[int, int]:
        n = len(buf)
        out = self.out
        stack = self._stack
        state = self._state
        while True:
            if state == _STRING:
                m = _STRING_STOP.search(buf, i)
                if m is None:
                    out.append(buf[i:])
                    i = n
                    break
                j = m.start()
                if j > i:
                    out.append(buf[i:j])
                    i = j
                c = buf[i]
                if c == '"':
                    out.append(c)
                    i += 1
                    state = self._after_string
                elif c == "\\":
                    if i + 1 >= n:
                        break
                    e = buf[i + 1]
                    if e in _SIMPLE_ESCAPES:
                        out.append(buf[i : i + 2])
                        i += 2
                    elif e == "u":
                        hexes = buf[i + 2 : i + 6]
                        if not all(h in _HEX for h in hexes):
                            return i, BAD
                        if len(hexes) < 4:
                            break
                        out.append(buf[i : i + 6])
                        i += 6
                    else:
                        return i, BAD
                else:
                    out.append(_CONTROL.get(c) or f"\\u{ord(c):04x}")
                    i += 1
                continue
            if state == _AFTER and not stack:
                self._state = state
                return i, DONE
            while i < n and buf[i] in _WS:
                i += 1
            if i >= n:
                break
            c = buf[i]
            if state == _AFTER:
                top = stack[-1]
                if c == ",":
                    state = _KEY if top == "{" else _VALUE
                elif (c == "}" and top == "{") or (c == "]" and top == "["):
                    stack.pop()
                else:
                    return i, BAD
                out.append(c)
                i += 1
            elif state in (_KEY_OR_END, _KEY):
                if c == '"':
                    out.append(c)
                    i += 1
                    state, self._after_string = _STRING, _COLON
                elif c == "}" and state == _KEY_OR_END:
                    stack.pop()
                    out.append(c)
                    i += 1
                    state = _AFTER
                else:
                    return i, BAD
            elif state == _COLON:
                if c != ":":
                    return i, BAD
                out.append(c)
                i += 1
                state = _VALUE
            elif state == _VALUE_OR_END and c == "]":
                stack.pop()
                out.append(c)
                i += 1
                state = _AFTER
            else:  # a value
                if c == "{" or c == "[":
                    stack.append(c)
                    out.append(c)
                    i += 1
                    state = _KEY_OR_END if c == "{" else _VALUE_OR_END
                elif c == '"':
                    out.append(c)
                    i += 1
                    state, self._after_string = _STRING, _AFTER
                elif c == "-" or "0" <= c <= "9":
                    j = i
                    while j < n and buf[j] in _NUMBER_CHARS:
                        j += 1
                    if j == n and not final:
                        break  # the number may go on
                    if _NUMBER.fullmatch(buf, i, j) is None:
                        return i, BAD
                    out.append(buf[i:j])
                    i = j
                    state = _AFTER
                elif c in _WORDS:
                    word = _WORDS[c]
                    got = buf[i : i + len(word)]
                    if not word.startswith(got):
                        return i, BAD
                    if len(got) < len(word):
                        break
                    out.append(word)
                    i += len(word)
                    state = _AFTER
                else:
                    return i, BAD
        self._state = state
        if final:
            return i, BAD  # text ended inside the value
        return i, MORE
