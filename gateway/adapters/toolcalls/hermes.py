"""Hermes' format, which Qwen2.5, Qwen3, the Hermes 2 and 3 models and many fine-tunes write:
each call a JSON object between tags, several calls one after another.

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

A call whose object is complete but whose closing tag never came (the text ended, or the
backend stopped on `</tool_call>`) still counts, as in vLLM; anything else between the object
and the closing tag makes the call malformed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.adapters.toolcalls.core import CallStream, Marker, Outcome, Reader
from gateway.adapters.toolcalls.jsoncalls import ARGUMENTS, CallObject

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"


class HermesReader(Reader):
    __slots__ = ("_call", "_closing")

    def __init__(self, stream: CallStream, marker: str, consumed: bool) -> None:
        super().__init__(stream, marker, consumed)
        self._call = CallObject(self, ARGUMENTS)
        self._closing = False

    def run(self, final: bool) -> Outcome | None:
        if not self._closing:
            outcome = self._call.step(final)
            if outcome is not None or not self._call.complete:
                return outcome
            self._closing = True
        self.skip_ws()
        got = self.literal(CLOSE_TAG, final)
        if got is None:
            return None
        if got or (final and CLOSE_TAG.startswith(self.buf[self.i :])):
            self.end_call()
            return self.done(len(self.buf) if not got else self.i)
        return self.fail(self.i)


MARKERS = (Marker(OPEN_TAG, HermesReader),)


def render(name: str, arguments: Mapping[str, Any]) -> str:
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{OPEN_TAG}\n{call}\n{CLOSE_TAG}"
