"""Neutral request, result and stream-event types shared by every dialect.

Requests are validated at the edge by each dialect's pydantic schema and then carried in these
plain dataclasses. Stream events are slotted classes built once per upstream event, never pydantic
models, because they sit on the hot path.
"""

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Task(StrEnum):
    CHAT = "chat"
    COMPLETION = "completion"
    EMBEDDING = "embedding"


class Finish(StrEnum):
    """Canonical finish reasons; each dialect maps its own vocabulary onto these and back."""

    EOS = "eos"
    STOP_STRING = "stop_string"
    STOP_TOKEN = "stop_token"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CONTENT_FILTER = "content_filter"
    ABORT = "abort"
    ERROR = "error"
    UNKNOWN = "unknown"


@dataclass(slots=True)
class Message:
    role: str
    # A string, a list of content parts (dicts in OpenAI form), or None (assistant with tool calls).
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    def text(self) -> str:
        """The message text with content parts joined; non-text parts contribute nothing."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.get("text", "") for p in self.content if p.get("type") == "text")


@dataclass(slots=True)
class Request:
    """One client request in neutral form.

    `params` holds every optional knob the client set, under neutral names (see core.params);
    absent keys mean "the client did not say". `raw` is the client's parsed body, kept so that a
    same-dialect route can forward fields the gateway does not know.
    """

    task: Task
    inbound: str
    model: str | None = None
    messages: list[Message] | None = None
    prompt: str | list[str] | None = None
    prompt_ids: list[int] | list[list[int]] | None = None
    input: list[str] | list[list[int]] | None = None  # embeddings
    stream: bool = False
    include_usage: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] | None = None
    # Values an inbound dialect read from the request path besides the model (Triton's version).
    path_params: dict[str, str] = field(default_factory=dict)
    # The client's dialect reports generated token ids (MindIE native, TGI).
    wants_token_ids: bool = False
    # Set by the pipeline: the gateway's request id, the client's body size, and the hints
    # dropped for this backend.
    request_id: str = ""
    body_bytes: int = 0
    dropped: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    extra: dict[str, Any] | None = None  # dialect extras (cached tokens, reasoning tokens, timings)


@dataclass(slots=True)
class Choice:
    index: int = 0
    text: str = ""
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    finish: Finish | None = None
    logprobs: Any = None
    token_ids: list[int] | None = None


@dataclass(slots=True)
class Result:
    """A whole (non-streamed) generation result."""

    choices: list[Choice]
    usage: Usage | None = None
    model: str | None = None
    # Same-dialect routes may hand the upstream body to the client unchanged.
    passthrough: bytes | None = None


@dataclass(slots=True)
class EmbeddingResult:
    data: list[Any]  # one vector (list of floats) or base64 string per input, in input order
    usage: Usage | None = None
    model: str | None = None
    passthrough: bytes | None = None


# ---- stream events -------------------------------------------------------------------------


class Event:
    __slots__ = ()


class TextDelta(Event):
    __slots__ = ("index", "logprobs", "text", "token_ids")

    def __init__(self, text: str, index: int = 0, logprobs: Any = None, token_ids: list[int] | None = None) -> None:
        self.text = text
        self.index = index
        self.logprobs = logprobs
        self.token_ids = token_ids

    def __repr__(self) -> str:
        return f"TextDelta({self.text!r}, index={self.index})"


class ReasoningDelta(Event):
    __slots__ = ("index", "text")

    def __init__(self, text: str, index: int = 0) -> None:
        self.text = text
        self.index = index

    def __repr__(self) -> str:
        return f"ReasoningDelta({self.text!r}, index={self.index})"


class ToolCallDelta(Event):
    """A fragment of one tool call; `call_index` orders calls within a choice, as OpenAI does."""

    __slots__ = ("arguments", "call_index", "id", "index", "name")

    def __init__(
        self,
        call_index: int,
        id: str | None = None,
        name: str | None = None,
        arguments: str = "",
        index: int = 0,
    ) -> None:
        self.call_index = call_index
        self.id = id
        self.name = name
        self.arguments = arguments
        self.index = index

    def __repr__(self) -> str:
        return f"ToolCallDelta({self.call_index}, {self.id!r}, {self.name!r}, {self.arguments!r})"


class FinishEvent(Event):
    __slots__ = ("index", "reason")

    def __init__(self, reason: Finish, index: int = 0) -> None:
        self.reason = reason
        self.index = index

    def __repr__(self) -> str:
        return f"FinishEvent({self.reason.value}, index={self.index})"


class UsageEvent(Event):
    __slots__ = ("usage",)

    def __init__(self, usage: Usage) -> None:
        self.usage = usage

    def __repr__(self) -> str:
        return f"UsageEvent({self.usage})"


class Frame(Event):
    """An upstream event payload the client's dialect takes as it is (same-dialect routes only).

    Parsers emit it next to the neutral events decoded from the same payload: pass-through
    renderers write the frames and ignore the rest, translating renderers do the opposite.
    """

    __slots__ = ("payload", "usage_only")

    def __init__(self, payload: bytes, usage_only: bool = False) -> None:
        self.payload = payload
        # A frame that carries nothing but usage the gateway asked for on its own behalf.
        self.usage_only = usage_only
