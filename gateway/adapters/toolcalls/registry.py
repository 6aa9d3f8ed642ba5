"""The tool-call formats by the names a backend's `tool_parser:` gives them (vLLM's names for
`--tool-call-parser`), and what each offers: reading an answer whole or streamed, writing a call
as its models write one, and the constraint that forces calls where the format is JSON."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.adapters.toolcalls import hermes, llama, mistral, pythonic, qwen3_coder
from gateway.adapters.toolcalls.calls import Parsed, Tools, merge, nine_char_call_id, openai_call_id
from gateway.adapters.toolcalls.choice import ToolPlan, calls_schema, plan_tool_choice
from gateway.adapters.toolcalls.core import CallStream, Marker
from gateway.adapters.toolcalls.jsoncalls import CallListReader

# A forced answer (tool_choice required or named) is the bare list the constraint allows.
_FORCED = (Marker("[", CallListReader, consumed=False, start_only=True),)


@dataclass(frozen=True, slots=True)
class ToolParser:
    """One format: the markers that open its calls and their readers, how its models write a
    call, the kind of id its calls get."""

    name: str
    markers: tuple[Marker, ...]
    writer: Callable[[str, Mapping[str, Any]], str]
    new_id: Callable[[], str] = openai_call_id
    # Where a forced call's arguments go; None for a format that is not JSON.
    args_key: str | None = None

    def stream(
        self,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        ids: Callable[[], str] | None = None,
        whole_calls: bool = False,
        forced: bool = False,
    ) -> CallStream:
        """A reader for one streamed choice. `forced`: the answer was constrained by
        `calls_schema`. `ids` makes the call ids (the format's own kind by default)."""
        markers = _FORCED if forced and self.args_key else self.markers
        return CallStream(markers, Tools(tools), ids or self.new_id, whole_calls=whole_calls)

    def parse(
        self,
        text: str,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        ids: Callable[[], str] | None = None,
        whole_calls: bool = True,
        forced: bool = False,
    ) -> Parsed:
        """A whole answer: its text outside calls, its calls, and how many were malformed."""
        markers = _FORCED if forced and self.args_key else self.markers
        if not any(m.text[0] in text for m in markers):
            return Parsed(text, [], 0)  # no call can start anywhere: the answer is text (the usual)
        s = self.stream(tools, ids=ids, whole_calls=whole_calls, forced=forced)
        events = s.feed(text)
        events += s.close()
        return merge(events, s.failures)

    def render_call(self, name: str, arguments: Mapping[str, Any] | str) -> str:
        """One call written as this format's models write it."""
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
        return self.writer(name, args)

    def plan(
        self,
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: Any,
        parallel_tool_calls: bool | None = None,
    ) -> ToolPlan:
        return plan_tool_choice(self.args_key, tools, tool_choice, parallel_tool_calls)

    def calls_schema(
        self,
        tools: Sequence[Mapping[str, Any]],
        tool_choice: Any,
        parallel_tool_calls: bool | None = None,
    ) -> dict[str, Any] | None:
        """The JSON schema that forces `tool_choice` (required or named) in this format; None
        when the format is not JSON."""
        if self.args_key is None:
            return None
        return calls_schema(self.args_key, tools, tool_choice, parallel_tool_calls)


PARSERS: Mapping[str, ToolParser] = {
    p.name: p
    for p in (
        ToolParser("hermes", hermes.MARKERS, hermes.render, args_key="arguments"),
        ToolParser("llama3_json", llama.MARKERS, llama.render, args_key="parameters"),
        ToolParser("mistral", mistral.MARKERS, mistral.render, nine_char_call_id, args_key="arguments"),
        ToolParser("pythonic", pythonic.MARKERS, pythonic.render),
        ToolParser("qwen3_coder", qwen3_coder.MARKERS, qwen3_coder.render),
    )
}


def get_parser(name: str) -> ToolParser:
    """The format called `name`; ValueError naming the known ones otherwise."""
    parser = PARSERS.get(name)
    if parser is None:
        raise ValueError(f"unknown tool parser {name!r}; known: {', '.join(sorted(PARSERS))}")
    return parser


def render_call(parser_name: str, name: str, arguments: Mapping[str, Any] | str) -> str:
    """One call written as the models of `parser_name` write it (the simulator's answers)."""
    return get_parser(parser_name).render_call(name, arguments)
