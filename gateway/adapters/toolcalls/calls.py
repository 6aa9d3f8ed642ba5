"""What a reading gives, and the small facts every format needs: call ids, the names a call
may have, arguments as compact JSON, the request's tools by name."""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from gateway.neutral.events import Event, TextDelta, ToolCallDelta

_ALPHANUMERIC = string.ascii_letters + string.digits
_NOT_IN_NAMES = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def openai_call_id() -> str:
    """An id in OpenAI's form: `call_` and 24 letters or digits."""
    return "call_" + "".join(random.choices(_ALPHANUMERIC, k=24))


def nine_char_call_id() -> str:
    """Nine letters or digits: the only ids Mistral's chat templates take back in a later turn."""
    return "".join(random.choices(_ALPHANUMERIC, k=9))


def plain_name(name: str) -> bool:
    """A name a client can be given: some characters, none of them control characters or
    halves of a surrogate pair (which a JSON escape in the model's text can make)."""
    return 0 < len(name) <= 256 and _NOT_IN_NAMES.search(name) is None


def compact_json(value: Any) -> str:
    """`value` as compact JSON, non-ASCII characters kept but for lone surrogates, which no
    UTF-8 text can carry and are written as escapes."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class ToolCall(NamedTuple):
    id: str
    name: str
    arguments: str  # JSON text


class Parsed(NamedTuple):
    """A whole answer read: the text outside calls, the calls, and how many malformed calls
    were given back as text (or, streamed, cut short)."""

    content: str
    calls: list[ToolCall]
    failures: int = 0


def merge(events: Sequence[Event], failures: int = 0) -> Parsed:
    """Stream events as the whole answer they add up to."""
    text: list[str] = []
    calls: dict[int, list[str]] = {}
    heads: dict[int, tuple[str, str]] = {}
    for ev in events:
        if type(ev) is TextDelta:
            text.append(ev.text)
        elif type(ev) is ToolCallDelta:
            if ev.id is not None and ev.name is not None:
                heads[ev.call_index] = (ev.id, ev.name)
            calls.setdefault(ev.call_index, []).append(ev.arguments)
    out = [ToolCall(*heads[i], "".join(calls[i])) for i in sorted(calls) if i in heads]
    return Parsed("".join(text), out, failures)


class Tools:
    """The request's tools by name. With no tools given, any name is taken (as vLLM does)."""

    __slots__ = ("_params",)

    def __init__(self, tools: Sequence[Mapping[str, Any]] | None) -> None:
        self._params: dict[str, Mapping[str, Any]] = {}
        for tool in tools or ():
            fn = tool.get("function", tool)
            if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
                params = fn.get("parameters")
                self._params[fn["name"]] = params if isinstance(params, Mapping) else {}

    def known(self, name: str) -> bool:
        return not self._params or name in self._params

    def properties(self, name: str) -> Mapping[str, Any]:
        """The JSON schemas of the tool's parameters, by parameter name ({} when unknown)."""
        props = self._params.get(name, {}).get("properties")
        return props if isinstance(props, Mapping) else {}
