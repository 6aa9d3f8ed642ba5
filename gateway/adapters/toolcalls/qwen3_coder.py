"""Qwen3-Coder's XML-like format: a function tag per call, a tag per parameter, values as
plain text.

    <tool_call>
    <function=get_weather>
    <parameter=city>
    San Francisco
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

As in vLLM: one newline right after the opening parameter tag and one right before the closing
one belong to the markup; a value ends at `</parameter>`, or where the next `<parameter=` or
`</function>` begins; the `<tool_call>` wrapper may be missing or left open. Values are typed
by the tool's schema (gateway.adapters.toolcalls.coerce): a parameter that can only be a string
streams as it is written, any other is sent whole once its value ends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.adapters.toolcalls.calls import compact_json, plain_name
from gateway.adapters.toolcalls.coerce import schema_types, value_json
from gateway.adapters.toolcalls.core import CallStream, Marker, Outcome, Reader, held_back

TOOL_CALL = "<tool_call>"
END_TOOL_CALL = "</tool_call>"
FUNCTION = "<function="
END_FUNCTION = "</function>"
PARAMETER = "<parameter="
END_PARAMETER = "</parameter>"
_VALUE_ENDS = (END_PARAMETER, PARAMETER, END_FUNCTION)
_STRING = frozenset({"string"})
_LONGEST_NAME = 256

_PREAMBLE, _NAME, _BODY, _PARAMETER_NAME, _VALUE, _AFTER = range(6)


def _escaped(text: str) -> str:
    return compact_json(text)[1:-1]


class Qwen3CoderReader(Reader):
    __slots__ = (
        "_count",
        "_lead",
        "_prefix",
        "_properties",
        "_state",
        "_streamed",
        "_types",
        "_value",
        "_word",
        "_wrapped",
    )

    def __init__(self, stream: CallStream, marker: str, consumed: bool) -> None:
        super().__init__(stream, marker, consumed)
        self._wrapped = marker == TOOL_CALL
        self._state = _PREAMBLE if self._wrapped else _NAME
        self._word = ""
        self._properties: Mapping[str, Any] = {}
        self._count = 0  # parameters so far
        self._types = _STRING
        self._streamed = True
        self._prefix = ""
        self._lead = True
        self._value: list[str] = []

    def run(self, final: bool) -> Outcome | None:
        while True:
            state = self._state
            if state == _PREAMBLE:
                self.skip_ws()
                got = self.literal(FUNCTION, final)
                if not got:
                    return None if got is None else self.fail(self.i)
                self._word, self._state = "", _NAME
            elif state in (_NAME, _PARAMETER_NAME):
                outcome = self._read_name(final)
                if outcome is not None or self._state == state:
                    return outcome
            elif state == _BODY:
                self.skip_ws()
                got = self.literal(PARAMETER, final)
                if got:
                    self._word, self._state = "", _PARAMETER_NAME
                    continue
                ends = self.literal(END_FUNCTION, final)
                if ends:
                    self._end_arguments()
                elif got is None or ends is None:
                    return None
                else:
                    return self.fail(self.i)
            elif state == _VALUE:
                outcome = self._read_value(final)
                if outcome is not None or self._state == _VALUE:
                    return outcome
            else:
                return self._after(final)

    def _read_name(self, final: bool) -> Outcome | None:
        """A function's or parameter's name, up to the `>` that closes its tag."""
        buf, i = self.buf, self.i
        end = buf.find(">", i)
        stop = buf.find("<", i, end if end >= 0 else len(buf))
        piece = buf[i : stop if stop >= 0 else end if end >= 0 else len(buf)]
        room = _LONGEST_NAME - len(self._word)
        if len(piece) > room:
            return self.fail(i + room)
        if stop >= 0:
            return self.fail(stop)  # another tag before this one closed
        self._word += piece
        self.i = i + len(piece)
        if end < 0:
            return self.fail(self.i) if final else None
        self.i += 1
        name = self._word.strip()
        if not plain_name(name):
            return self.fail(self.i)
        if self._state == _NAME:
            self.loud = True
            if not self.stream.known(name):
                return self.fail(self.i)
            self.stream.on_name(name)
            self._properties = self.stream.tools.properties(name)
            self._state = _BODY
            return None
        self._types = schema_types(self._properties[name]) if name in self._properties else _STRING
        self._streamed = self._types == _STRING
        self._prefix = ("," if self._count else "{") + compact_json(name) + ":"
        if self._streamed:
            self.stream.on_args(self._prefix + '"')
        self._count += 1
        self._lead, self._value = True, []
        self._state = _VALUE
        return None

    def _read_value(self, final: bool) -> Outcome | None:
        buf, i = self.buf, self.i
        at, end = -1, ""
        for word in _VALUE_ENDS:
            k = buf.find(word, i, len(buf) if at < 0 else at + len(word))
            if k >= 0 and (at < 0 or k < at):
                at, end = k, word
        if at < 0:
            if final:
                return self.fail(len(buf))
            safe = len(buf) - held_back(buf[i:], _VALUE_ENDS)
            if safe > i and buf[safe - 1] == "\n":
                safe -= 1  # perhaps the newline that belongs to the closing tag
            self._piece(buf[i:safe], last=False)
            self.i = safe
            return None
        self._piece(buf[i:at], last=True)
        self.i = at + len(end)
        if end == END_PARAMETER:
            self._state = _BODY
        elif end == PARAMETER:
            self._word, self._state = "", _PARAMETER_NAME
        else:
            self._end_arguments()
        return None

    def _piece(self, text: str, last: bool) -> None:
        if self._lead and text:
            self._lead = False
            if text[0] == "\n":
                text = text[1:]
        if last and text.endswith("\n"):
            text = text[:-1]
        if self._streamed:
            self.stream.on_args(_escaped(text) + ('"' if last else ""))
            return
        self._value.append(text)
        if last:
            self.stream.on_args(self._prefix + value_json("".join(self._value), self._types))

    def _end_arguments(self) -> None:
        self.stream.on_args("}" if self._count else "{}")
        self._state = _AFTER

    def _after(self, final: bool) -> Outcome | None:
        """After `</function>`: the closing `</tool_call>`, if the call opened with one."""
        start = self.i
        if self._wrapped:
            self.skip_ws()
            got = self.literal(END_TOOL_CALL, final)
            if got is None:
                self.i = start
                return None
            if got:
                self.end_call()
                return self.done(self.i)
            if final and END_TOOL_CALL.startswith(self.buf[self.i :]):
                self.end_call()
                return self.done(len(self.buf))
            self.i = start
        self.end_call()
        return self.done(start)


MARKERS = (Marker(TOOL_CALL, Qwen3CoderReader), Marker(FUNCTION, Qwen3CoderReader))


def render(name: str, arguments: Mapping[str, Any]) -> str:
    lines = [TOOL_CALL, f"{FUNCTION}{name}>"]
    for key, value in arguments.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines += [f"{PARAMETER}{key}>", text, END_PARAMETER]
    lines += [END_FUNCTION, END_TOOL_CALL]
    return "\n".join(lines)
