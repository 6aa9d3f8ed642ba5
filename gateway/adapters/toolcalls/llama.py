"""Llama 3.1 to 3.3's JSON format: a call is a bare JSON object with the function's name and
its `parameters` (or `arguments`), possibly after `<|python_tag|>`; several calls are separated
by `;`.

    {"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {}}

With no marker of its own, any `{` may start a call, as in vLLM: an object is read as a call
when it opens with one of a call's keys and names one of the request's tools; any other brace
is text, and is not counted as a malformed call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.adapters.toolcalls.core import CallStream, Marker, Outcome, Reader
from gateway.adapters.toolcalls.jsoncalls import ARGUMENTS_OR_PARAMETERS, CallObject

PYTHON_TAG = "<|python_tag|>"
_CALL_KEYS = frozenset({"name", "parameters", "arguments", "type"})


class LlamaReader(Reader):
    """A call object, then the `;` (and whitespace) that may separate it from the next."""

    __slots__ = ("_between", "_call")

    sure = False

    def __init__(self, stream: CallStream, marker: str, consumed: bool) -> None:
        super().__init__(stream, marker, consumed)
        self._call = CallObject(self, ARGUMENTS_OR_PARAMETERS, None if self.sure else _CALL_KEYS)
        self._between = False

    def run(self, final: bool) -> Outcome | None:
        if not self._between:
            outcome = self._call.step(final)
            if outcome is not None or not self._call.complete:
                return outcome
            self.end_call()
            self._between = True
        buf, n = self.buf, len(self.buf)
        while True:
            j = self.i
            while j < n and buf[j] in " \t\r\n":
                j += 1
            if j < n and buf[j] == ";":
                self.i = j + 1  # a separator is dropped with the whitespace before it
                continue
            if j == n and not final:
                return None
            return self.done(self.i)


class TaggedLlamaReader(LlamaReader):
    __slots__ = ()
    sure = True


MARKERS = (Marker("{", LlamaReader, consumed=False), Marker(PYTHON_TAG, TaggedLlamaReader))


def render(name: str, arguments: Mapping[str, Any]) -> str:
    return json.dumps({"name": name, "parameters": arguments}, ensure_ascii=False)
