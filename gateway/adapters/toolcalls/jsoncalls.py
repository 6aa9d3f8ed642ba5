"""Calls written as JSON objects, `{"name": ..., "arguments": {...}}`, alone or in a list: the
part that Hermes, Llama 3's JSON and Mistral's formats share, and what a forced tool choice has
any of them write.

The keys may come in any order (the arguments before the name are kept until the name is
known); other keys are read and ignored; a call without arguments gets `{}`. Arguments that the
model wrote as a JSON string holding an object (some fine-tunes do) are passed on as that
object, as vLLM does; any other string stays a JSON string.
"""

from __future__ import annotations

import json

from gateway.adapters.toolcalls.calls import plain_name
from gateway.adapters.toolcalls.core import CallStream, Outcome, Reader
from gateway.adapters.toolcalls.jsonscan import BAD, DONE, MORE, JsonValue

ARGUMENTS = ("arguments",)
ARGUMENTS_OR_PARAMETERS = ("arguments", "parameters")

_OPEN, _KEY_OR_END, _KEY, _KEY_TEXT, _COLON, _VALUE, _VALUE_TEXT, _AFTER = range(8)
_NAME, _ARGS, _ARGS_STRING, _SKIP = range(4)


def unwrap_arguments(literal: str) -> str:
    """Arguments given as a JSON string: the object it holds when it holds one, else itself."""
    inner = json.loads(literal)
    body = inner.lstrip()
    if body.startswith("{"):
        value = JsonValue()
        end, found = value.run(body, 0, True)
        if found == DONE and not body[end:].strip():
            return "".join(value.out)
    return literal


class CallObject:
    """Reads one call object from its reader's text, reporting to the reader's stream.

    `first_keys`, when given, are the keys a call may open with: an object that opens with
    another is no call (Llama's calls have no marker, so any JSON object in prose is looked at).
    """

    __slots__ = (
        "_args_keys",
        "_first_keys",
        "_had_args",
        "_key",
        "_kind",
        "_state",
        "_value",
        "complete",
        "name",
        "reader",
    )

    def __init__(self, reader: Reader, args_keys: tuple[str, ...], first_keys: frozenset[str] | None = None) -> None:
        self.reader = reader
        self._args_keys = args_keys
        self._first_keys = first_keys
        self._state = _OPEN
        self._key: str | None = None
        self._kind = _SKIP
        self._value = JsonValue()
        self._had_args = False
        self.name: str | None = None
        self.complete = False  # read up to its closing brace

    def step(self, final: bool) -> Outcome | None:
        """Reads on: the reader's failure when the object is no call, else None."""
        found = self.run(final)
        self.complete = found == DONE
        return self.reader.fail(self.reader.i) if found == BAD else None

    def run(self, final: bool) -> int:
        """Reads on from the reader's position; MORE, DONE (past the closing brace) or BAD."""
        r = self.reader
        stream = r.stream
        while True:
            state = self._state
            if state in (_KEY_TEXT, _VALUE_TEXT):
                value = self._value
                r.i, found = value.run(r.buf, r.i, final)
                if self._kind == _ARGS and state == _VALUE_TEXT and value.out:
                    stream.on_args("".join(value.out))
                    value.out.clear()
                if found != DONE:
                    return found
                text = "".join(value.out)
                if state == _KEY_TEXT:
                    key = json.loads(text)
                    if self._first_keys is not None and self._key is None and key not in self._first_keys:
                        return BAD
                    self._key = key
                    self._state = _COLON
                elif not self._took(text, stream):
                    return BAD
                else:
                    self._state = _AFTER
                continue
            r.skip_ws()
            if r.i >= len(r.buf):
                return BAD if final else MORE
            c = r.buf[r.i]
            if state == _OPEN:
                if c != "{":
                    return BAD
                r.i += 1
                self._state = _KEY_OR_END
            elif state in (_KEY_OR_END, _KEY):
                if c == '"':
                    self._value = JsonValue()
                    self._state = _KEY_TEXT
                elif c == "}" and state == _KEY_OR_END:
                    r.i += 1
                    return self._close()
                else:
                    return BAD
            elif state == _COLON:
                if c != ":":
                    return BAD
                r.i += 1
                self._state = _VALUE
            elif state == _VALUE:
                if self._key == "name" and self.name is None:
                    self._kind = _NAME
                elif self._key in self._args_keys and not self._had_args:
                    self._had_args = True
                    self._kind = _ARGS_STRING if c == '"' else _ARGS
                else:
                    self._kind = _SKIP
                self._value = JsonValue()
                self._state = _VALUE_TEXT
            else:  # after a value
                if c == ",":
                    r.i += 1
                    self._state = _KEY
                elif c == "}":
                    r.i += 1
                    return self._close()
                else:
                    return BAD

    def _took(self, text: str, stream: CallStream) -> bool:
        """Takes a complete value for its key; False when it makes the object no call."""
        if self._kind == _NAME:
            name = json.loads(text)
            if not isinstance(name, str) or not plain_name(name):
                return False
            self.reader.loud = True
            if not stream.known(name):
                return False
            self.name = name
            stream.on_name(name)
        elif self._kind == _ARGS_STRING:
            stream.on_args(unwrap_arguments(text))
        return True

    def _close(self) -> int:
        if self.name is None:
            return BAD
        if not self._had_args:
            self.reader.stream.on_args("{}")
        return DONE


_LIST_OPEN, _LIST_FIRST, _LIST_CALL, _LIST_AFTER, _LIST_NEXT = range(5)


class CallListReader(Reader):
    """A JSON list of one or more call objects, `[{...}, {...}]`."""

    __slots__ = ("_call", "_list_state")

    args_keys: tuple[str, ...] = ARGUMENTS_OR_PARAMETERS

    def __init__(self, stream: CallStream, marker: str, consumed: bool) -> None:
        super().__init__(stream, marker, consumed)
        self._list_state = _LIST_OPEN
        self._call = CallObject(self, self.args_keys)

    def run(self, final: bool) -> Outcome | None:
        return self.run_list(final)

    def run_list(self, final: bool) -> Outcome | None:
        while True:
            state = self._list_state
            if state == _LIST_CALL:
                outcome = self._call.step(final)
                if outcome is not None or not self._call.complete:
                    return outcome
                self.end_call()
                self._list_state = _LIST_AFTER
                continue
            self.skip_ws()
            if self.i >= len(self.buf):
                return self.fail(self.i) if final else None
            c = self.buf[self.i]
            if state == _LIST_OPEN:
                if c != "[":
                    return self.fail(self.i)
                self.i += 1
                self._list_state = _LIST_FIRST
            elif state == _LIST_AFTER:
                if c == "]":
                    self.i += 1
                    return self.done(self.i)
                if c != ",":
                    return self.fail(self.i)
                self.i += 1
                self._list_state = _LIST_NEXT
            elif c == "{":
                self._call = CallObject(self, self.args_keys)
                self._list_state = _LIST_CALL
            else:  # an empty list is no call either
                return self.fail(self.i)
