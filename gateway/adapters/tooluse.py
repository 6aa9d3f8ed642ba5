"""Tools on a backend whose wire carries only text: what a request's tools ask of it, and the
calls read back out of its model's text.

The plan asks `tool_use` what becomes of a request's tools on such a backend (its carriage is
`templated`, and the backend names its model's format with `tool_parser:`): they are rendered
into the prompt by the chat template and the answer is read for calls (`auto`); they are left
out (`none`); the answer is held to calls by a JSON schema the backend constrains its decoding
with, sent as the request's `response_format` (`required`, a named function); or the request is
refused. The engine applies the reading the way it cuts at stop strings (gateway.adapters.stops):
`ToolReading.read` on a whole result, `ToolStream` around a stream. A call that does not parse
comes back as text and is counted on the reading, for whoever observes the exchange. See
docs/tools.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.adapters.toolcalls import CallStream, ToolAction, ToolParser, get_parser
from gateway.codec.capabilities import at_end
from gateway.codec.contract import BackendView, Carriage, EventStream
from gateway.neutral.errors import Unsupported
from gateway.neutral.events import Event, FinishEvent, TextDelta, TextRun, ToolCallDelta, expand, new_event
from gateway.neutral.params import Fate, Params
from gateway.neutral.types import Finish, Result

# The name of the schema that holds a forced answer to calls.
FORCED_NAME = "tool_calls"
_EMULATED = {"tools": Fate.EMULATE, "tool_choice": Fate.EMULATE, "parallel_tool_calls": Fate.EMULATE}


@dataclass(eq=False, slots=True)
class ToolReading:
    """How one request's answers are read for calls, and how many malformed calls they held
    (over every upstream request of the plan)."""

    parser: ToolParser
    tools: tuple[Mapping[str, Any], ...]
    forced: bool = False
    # At most one call per answer (parallel_tool_calls false): any after the first is left out.
    single: bool = False
    failures: int = 0

    def stream(self) -> CallStream:
        # A call goes out once it is whole: one that breaks comes back as text, never as a call
        # a client would run with half its arguments (docs/tools.md, "Streaming").
        return self.parser.stream(self.tools, forced=self.forced, whole_calls=True)

    def read(self, result: Result) -> Result:
        """Each choice of a whole result, its text read for calls."""
        choices = []
        read = False  # a choice changed
        for choice in result.choices:
            parsed = self.parser.parse(choice.text, self.tools, forced=self.forced)
            self.failures += parsed.failures
            read = read or bool(parsed.calls or parsed.failures)
            if parsed.calls:
                made = parsed.calls[:1] if self.single else parsed.calls
                calls = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in made
                ]
                choice = replace(choice, text=parsed.content, tool_calls=calls, finish=_finish(choice.finish))
            elif parsed.failures:
                choice = replace(choice, text=parsed.content)
            choices.append(choice)
        if not read and result.passthrough is None:
            return result  # text only, as it came
        return replace(result, choices=choices, passthrough=None)


def _finish(reason: Finish | None) -> Finish:
    """A choice that made calls finished to let them run, unless it was cut short."""
    return reason if reason is Finish.LENGTH else Finish.TOOL_CALLS


def _refused(backend: BackendView[Any], why: str) -> Unsupported:
    return Unsupported(
        f"backend {backend.name!r} ({backend.dialect}) {why}", param="tool_choice", code="unsupported_tool_choice"
    )


def tool_use(
    params: Params, carriage: Carriage, backend: BackendView[Any]
) -> tuple[Params, Mapping[str, Fate], ToolReading | None]:
    """What a request's tools become on `backend`: its parameters as the backend is to get them
    (tools left out, or the schema that forces calls as its response_format), the fates of the
    tool parameters, and how the answer is read (None: as it is). Unsupported when the tool
    choice cannot be kept. A backend whose wire carries tools, or that names no format, is
    left to the parameters' own fates."""
    if not carriage.templated or backend.tool_parser is None or (params.tools is None and params.tool_choice is None):
        return params, {}, None
    parser = get_parser(backend.tool_parser)
    tools = params.tools or ()
    plan = parser.plan(tools, params.tool_choice, params.parallel_tool_calls)
    if plan.action is ToolAction.REFUSE:
        raise _refused(backend, f"cannot keep this tool_choice: {plan.reason}")
    if plan.action is ToolAction.NONE:
        # No tools in the prompt, so nothing to call and nothing to read.
        return params.replace(tools=None, tool_choice=None, parallel_tool_calls=None), _EMULATED, None
    if plan.action is ToolAction.FORCE:
        if params.response_format is not None:
            raise _refused(backend, "cannot hold one answer both to tool calls and to a response_format")
        if carriage.fates.get("response_format") is not Fate.MAP:
            raise _refused(
                backend,
                f"cannot constrain its output, so tool_choice {params.tool_choice!r} cannot be kept; "
                "use tool_choice auto or none",
            )
        schema = {"type": "json_schema", "json_schema": {"name": FORCED_NAME, "schema": plan.schema}}
        return params.replace(response_format=schema), _EMULATED, ToolReading(parser, tools, forced=True)
    return params, _EMULATED, ToolReading(parser, tools, single=params.parallel_tool_calls is False)


@dataclass(slots=True)
class _Choice:
    calls: CallStream
    # Log probabilities and token ids of text still held back, for the next text that goes out.
    logprobs: list[Any] = field(default_factory=list)
    token_ids: list[int] | None = None
    done: bool = False


class ToolStream:
    """An EventStream whose choices' text is read for calls: text goes on as text but for what
    may still be a call, which is held back until it is one or is not; calls go out as
    `ToolCallDelta`s as they arrive, and a choice that made any finishes `tool_calls`."""

    __slots__ = ("_choices", "_ended", "_inner", "_reading")

    def __init__(self, inner: EventStream, reading: ToolReading) -> None:
        self._inner = inner
        self._reading = reading
        self._choices: dict[int, _Choice] = {}
        self._ended = False

    def _choice(self, index: int) -> _Choice:
        st = self._choices.get(index)
        if st is None:
            st = self._choices[index] = _Choice(self._reading.stream())
        return st

    @property
    def ended(self) -> bool:
        return at_end(self._inner)

    async def next(self) -> list[Event] | None:
        while not self._ended:
            batch = await self._inner.next()
            if batch is None:
                self._ended = True
                out: list[Event] = []
                for index, st in self._choices.items():
                    if not st.done:
                        self._close(index, st, out)
                return out or None
            out = self._read(batch)
            if out:
                return out
        return None

    def _read(self, batch: list[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in batch:
            kind = type(ev)
            if kind is TextRun:
                assert isinstance(ev, TextRun)
                st = self._choice(ev.index)
                if st.done:
                    continue
                if ev.ids is None and not st.logprobs and st.token_ids is None and st.calls.passes(ev.texts):
                    out.append(ev)  # plain tokens: they pass as they came
                else:
                    for one in expand([ev]):
                        assert isinstance(one, TextDelta)
                        self._text(one, st, out)
            elif kind is TextDelta:
                assert isinstance(ev, TextDelta)
                st = self._choice(ev.index)
                if not st.done:
                    self._text(ev, st, out)
            elif kind is FinishEvent:
                assert isinstance(ev, FinishEvent)
                st = self._choice(ev.index)
                if st.done:
                    continue
                made = self._close(ev.index, st, out)
                out.append(ev._replace(reason=_finish(ev.reason)) if made else ev)
            else:
                out.append(ev)
        return out

    def _text(self, ev: TextDelta, st: _Choice, out: list[Event]) -> None:
        if ev.token_ids:
            st.token_ids = [*(st.token_ids or ()), *ev.token_ids]
        if isinstance(ev.logprobs, list):
            st.logprobs.extend(ev.logprobs)
        self._emit(ev.index, st, st.calls.feed(ev.text), out)

    def _close(self, index: int, st: _Choice, out: list[Event]) -> bool:
        """The choice's held text and calls sent; whether it made any calls."""
        self._emit(index, st, st.calls.close(), out)
        st.done = True
        self._reading.failures += st.calls.failures
        return st.calls.calls > 0

    def _emit(self, index: int, st: _Choice, events: list[Event], out: list[Event]) -> None:
        for ev in events:
            if type(ev) is TextDelta:
                assert isinstance(ev, TextDelta)
                if index or st.logprobs or st.token_ids is not None:
                    ev = new_event(TextDelta, (ev.text, index, st.logprobs or None, st.token_ids))
                    st.logprobs, st.token_ids = [], None
            else:
                assert isinstance(ev, ToolCallDelta)
                if ev.call_index and self._reading.single:
                    continue
                if index:
                    ev = ev._replace(index=index)
            out.append(ev)

    async def aclose(self) -> None:
        self._ended = True
        await self._inner.aclose()
