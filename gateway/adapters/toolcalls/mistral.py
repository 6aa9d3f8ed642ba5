"""Mistral's formats, after the `[TOOL_CALLS]` token: a JSON list of calls (tokenizers before
v11, as Mistral 7B v0.3 writes), a single call object, or the newer `name[ARGS]{...}` per call
(v11 and later, as Mistral Small 3.2 writes; `name{...}` when special tokens are left out of
the text), repeated with `[TOOL_CALLS]` for each further call.

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]
    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}

Call ids are nine letters or digits: Mistral's chat templates refuse any other in a later turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.adapters.toolcalls.core import CallStream, Marker, Outcome
from gateway.adapters.toolcalls.jsoncalls import ARGUMENTS, CallListReader, CallObject
from gateway.adapters.toolcalls.jsonscan import DONE, MORE, JsonValue

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")

_START, _LIST, _OBJECT, _NAME, _ARGUMENTS = range(5)


class MistralReader(CallListReader):
    __slots__ = ("_args", "_name", "_state")

    args_keys = ARGUMENTS

    def __init__(self, stream: CallStream, marker: str, consumed: bool) -> None:
        super().__init__(stream, marker, consumed)
        self._state = _START
        self._name = ""
        self._args = JsonValue()

    def run(self, final: bool) -> Outcome | None:
        if self._state == _START:
            self.skip_ws()
            if self.i >= len(self.buf):
                return self.fail(self.i) if final else None
            c = self.buf[self.i]
            if c == "[":
                self._state = _LIST
            elif c == "{":
                self._call = CallObject(self, ARGUMENTS)
                self._state = _OBJECT
            elif c in _NAME_CHARS:
                self._state = _NAME
            else:
                return self.fail(self.i)
        if self._state == _LIST:
            return self.run_list(final)
        if self._state == _OBJECT:
            outcome = self._call.step(final)
            if outcome is not None or not self._call.complete:
                return outcome
            self.end_call()
            return self.done(self.i)
        if self._state == _NAME:
            outcome = self._read_name(final)
            if outcome is not None or self._state == _NAME:
                return outcome
        return self._read_arguments(final)

    def _read_name(self, final: bool) -> Outcome | None:
        buf, n = self.buf, len(self.buf)
        j = self.i
        while j < n and buf[j] in _NAME_CHARS:
            j += 1
        self._name += buf[self.i : j]
        self.i = j
        if j == n:
            return self.fail(j) if final else None
        if buf[j] == "[":
            got = self.literal(ARGS, final)
            if got is None:
                return None
            if not got:
                return self.fail(j)
        elif buf[j] != "{":
            return self.fail(j)
        self.loud = True
        if not self.stream.known(self._name):
            return self.fail(self.i)
        self.stream.on_name(self._name)
        self._state = _ARGUMENTS
        return None

    def _read_arguments(self, final: bool) -> Outcome | None:
        args = self._args
        self.i, found = args.run(self.buf, self.i, final)
        if args.out:
            self.stream.on_args("".join(args.out))
            args.out.clear()
        if found != DONE:
            return None if found == MORE else self.fail(self.i)
        self.end_call()
        return self.done(self.i)


MARKERS = (Marker(TOOL_CALLS, MistralReader),)


def render(name: str, arguments: Mapping[str, Any]) -> str:
    return TOOL_CALLS + json.dumps([{"name": name, "arguments": arguments}], ensure_ascii=False)
