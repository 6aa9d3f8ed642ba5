"""The pythonic format of Llama 3.2 and Llama 4 (and ToolACE): the answer opens with a Python
list of calls with keyword arguments, literals only; Llama 4 may wrap it in
`<|python_start|>` and `<|python_end|>`.

    [get_weather(city='San Francisco', metric='celsius'), get_time()]

Each argument is read with `ast` when it is complete and turned into JSON (a tuple or set
becomes a list; `true`, `false` and `null` are taken for Python's own); nothing is evaluated.
An argument that is no literal, a positional argument or a repeated one make the call
malformed. As in vLLM, the list counts only at the start of the answer; a call goes out with
its first argument (or its closing parenthesis), so that a bracket in prose is never a call.
"""

from __future__ import annotations

import ast
import math
import warnings
from collections.abc import Mapping
from typing import Any

from gateway.adapters.toolcalls.calls import compact_json
from gateway.adapters.toolcalls.core import CallStream, Marker, Outcome, Reader

PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"

_IDENTIFIER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_ESCAPED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_JSON_WORDS = {"true": True, "false": False, "null": None}

(_OPEN, _LIST_START, _NAME, _PAREN, _ARG_START, _ARG_NAME, _EQUALS, _VALUE, _AFTER_CALL, _NEXT_CALL, _END) = range(11)


class NotLiteral(ValueError):
    pass


def _literal(node: ast.expr) -> Any:
    """The JSON value of a literal expression, as vLLM reads pythonic arguments."""
    if isinstance(node, ast.Constant):
        value = node.value
        if value is None or isinstance(value, str | int):
            return value
        if isinstance(value, float) and math.isfinite(value):
            return value
    elif isinstance(node, ast.Dict):
        if all(isinstance(k, ast.Constant) for k in node.keys):
            return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    elif isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [_literal(e) for e in node.elts]
    elif isinstance(node, ast.JoinedStr):
        if all(isinstance(p, ast.Constant) for p in node.values):
            return "".join(str(p.value) for p in node.values)  # type: ignore[attr-defined]
    elif isinstance(node, ast.Name) and node.id in _JSON_WORDS:
        return _JSON_WORDS[node.id]
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    raise NotLiteral(ast.dump(node)[:80])


def literal_json(source: str) -> str | None:
    """A Python literal as compact JSON; None when it is no literal."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an invalid escape in a string is no reason to talk
            node = ast.parse(source.strip(), mode="eval").body
        return compact_json(_literal(node))
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None


class PythonicReader(Reader):
    __slots__ = ("_brackets", "_keys", "_name", "_quote", "_state", "_value", "_word")

    sure = False  # a list at the start of an answer may be no call: `[1] See the note.`

    def __init__(self, stream: CallStream, marker: str, consumed: bool) -> None:
        super().__init__(stream, marker, consumed)
        self._state = _OPEN
        self._word = ""
        self._name = ""
        self._keys: list[str] = []  # the call's arguments so far
        self._value: list[str] = []  # the argument's source so far
        self._brackets: list[str] = []
        self._quote = ""

    def run(self, final: bool) -> Outcome | None:
        while True:
            state = self._state
            if state in (_NAME, _ARG_NAME):
                outcome = self._read_word(final)
                if outcome is not None:
                    return outcome
                if self._state == state:
                    return None
                continue
            if state == _VALUE:
                outcome = self._read_value(final)
                if outcome is not None or self._state == _VALUE:
                    return outcome
                continue
            if state == _END:
                got = self.literal(PYTHON_END, final)
                return None if got is None else self.done(self.i)
            self.skip_ws()
            if self.i >= len(self.buf):
                return self.fail(self.i) if final else None
            c = self.buf[self.i]
            starts_word = c.isidentifier()
            if state == _OPEN and c == "[":
                self._state = _LIST_START
            elif (state in (_LIST_START, _NEXT_CALL)) and starts_word:
                self._word, self._state = "", _NAME
                continue
            elif state == _PAREN and c == "(":
                self.loud = True
                if not self.stream.known(self._word):
                    return self.fail(self.i)
                self._name, self._keys = self._word, []
                self._state = _ARG_START
            elif state == _ARG_START and c == ")":
                self._took("}" if self._keys else "{}")
                self.i += 1
                self.end_call()
                self._state = _AFTER_CALL
                continue
            elif state == _ARG_START and starts_word:
                self._word, self._state = "", _ARG_NAME
                continue
            elif state == _EQUALS and c == "=" and self._word not in self._keys:
                self._value, self._brackets, self._quote = [], [], ""
                self._state = _VALUE
            elif state == _AFTER_CALL and c in ",]":
                self._state = _NEXT_CALL if c == "," else _END
            else:
                return self.fail(self.i)
            self.i += 1

    def _read_word(self, final: bool) -> Outcome | None:
        """A (dotted, for a name) identifier; moves on to what follows it."""
        buf, n = self.buf, len(self.buf)
        j = self.i
        dotted = self._state == _NAME
        while j < n and (buf[j] in _IDENTIFIER_CHARS or (dotted and buf[j] == ".") or buf[j].isidentifier()):
            j += 1
        self._word += buf[self.i : j]
        self.i = j
        if j == n and not final:
            return None
        parts = self._word.split(".")
        if not all(p.isidentifier() for p in parts) or len(self._word) > 256:
            return self.fail(j)
        self._state = _PAREN if dotted else _EQUALS
        return None

    def _read_value(self, final: bool) -> Outcome | None:
        """An argument's source, up to the comma or parenthesis that ends it."""
        buf, n, i = self.buf, len(self.buf), self.i
        value, brackets = self._value, self._brackets
        while i < n:
            c = buf[i]
            quote = self._quote
            if quote:
                if c == "\\":
                    if i + 1 >= n:
                        break
                    value.append(buf[i : i + 2])
                    i += 2
                    continue
                if buf.startswith(quote, i):
                    self._quote = ""
                    value.append(quote)
                    i += len(quote)
                    continue
                if len(quote) == 3 and not final and n - i < 3 and quote.startswith(buf[i:]):
                    break
                # A line break inside a one-line string: meant as one, written raw.
                value.append(_ESCAPED.get(c, c) if len(quote) == 1 else c)
                i += 1
                continue
            if c == "'" or c == '"':
                if not final and n - i < 3 and buf[i:] == c * (n - i):
                    break  # an empty string or a triple quote: the next character tells
                self._quote = c * 3 if buf.startswith(c * 3, i) else c
                value.append(self._quote)
                i += len(self._quote)
                continue
            if c in _OPENERS:
                brackets.append(_OPENERS[c])
            elif c in ")]}":
                if not brackets:
                    if c != ")":
                        return self.fail(i)
                    self.i = i
                    return self._argument(closes=True)
                if brackets.pop() != c:
                    return self.fail(i)
            elif c == "," and not brackets:
                self.i = i
                return self._argument(closes=False)
            value.append(c)
            i += 1
        self.i = i
        return self.fail(i) if final else None

    def _argument(self, closes: bool) -> Outcome | None:
        """Sends the argument just read; `closes` when the call's parenthesis ended it."""
        as_json = literal_json("".join(self._value))
        if as_json is None:
            return self.fail(self.i)
        self._took(("," if self._keys else "{") + compact_json(self._word) + ":" + as_json)
        self._keys.append(self._word)
        self.i += 1
        if closes:
            self._took("}")
            self.end_call()
            self._state = _AFTER_CALL
        else:
            self._state = _ARG_START
        return None

    def _took(self, piece: str) -> None:
        # The call goes out with its first argument: a name followed by no literal is no call.
        if not self._keys:
            self.stream.on_name(self._name)
        self.stream.on_args(piece)


class TaggedPythonicReader(PythonicReader):
    __slots__ = ()
    sure = True


MARKERS = (
    Marker("[", PythonicReader, consumed=False, start_only=True),
    Marker(PYTHON_START, TaggedPythonicReader),
)


def _python(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_python(k)}: {_python(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_python(v) for v in value) + "]"
    return repr(value)


def render(name: str, arguments: Mapping[str, Any]) -> str:
    args = ", ".join(f"{k}={_python(v)}" for k, v in arguments.items())
    return f"[{name}({args})]"
