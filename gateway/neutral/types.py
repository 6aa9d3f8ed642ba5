"""Neutral requests and whole answers, shared by every dialect.

Requests are validated at the edge by each dialect's pydantic schema and then carried in these
records (gateway.records: frozen to the type checker): nothing changes a request after it is
built (a fanned-out part is a copy).
"""

from dataclasses import field, replace
from enum import StrEnum
from typing import Any

from gateway.neutral.params import NONE, Params
from gateway.records import record


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


@record
class Message:
    role: str
    # A string, a list of content parts (dicts in OpenAI form), or None (assistant with tool calls).
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    def text(self) -> str:
        """The message text: content parts' texts joined with newlines (each part reads as its
        own paragraph); non-text parts contribute nothing. The one rule every text-only backend
        and chat template sees."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.get("text", "") for p in self.content if p.get("type") == "text")


@record(kw_only=True)
class Request:
    """One client request in neutral form.

    `params` holds the generation parameters the client set (see gateway.neutral.params). `raw`
    is the client's parsed body, kept so that a backend speaking the client's own wire can be
    given fields the gateway does not know.
    """

    task: Task
    # The wire API the client spoke (openai.chat, tgi...): a backend spoken to on the same one
    # may take the client's body as it is (codec.contract.Carriage.wire).
    wire: str
    model: str | None = None
    messages: list[Message] | None = None
    prompt: str | list[str] | None = None
    prompt_ids: list[int] | list[list[int]] | None = None
    input: list[str] | list[list[int]] | None = None  # embeddings
    stream: bool = False
    include_usage: bool = False
    params: Params = NONE
    raw: dict[str, Any] | None = None
    # Values an inbound dialect read from the request path besides the model (Triton's version).
    path_params: dict[str, str] = field(default_factory=dict)
    # The client's dialect reports generated token ids (MindIE native, TGI).
    wants_token_ids: bool = False
    # The client asked for each generated token's details: id, text, logprob (TGI's `details`).
    wants_token_details: bool = False

    def but(self, **changes: Any) -> "Request":
        """A copy with some fields changed."""
        return replace(self, **changes)


@record
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    extra: dict[str, Any] | None = None  # dialect extras (cached tokens, reasoning tokens, timings)


@record
class Choice:
    index: int = 0
    text: str = ""
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    finish: Finish | None = None
    # The stop string that ended it, where it is known (finish STOP_STRING).
    stop: str | None = None
    logprobs: Any = None
    token_ids: list[int] | None = None
    # Each generated token's text, aligned with token_ids, when known (the tokenizer's reading).
    tokens: list[str] | None = None


@record
class Result:
    """A whole (non-streamed) generation result."""

    choices: list[Choice]
    usage: Usage | None = None
    model: str | None = None
    # Same-wire routes hand the upstream body to the client unchanged.
    passthrough: bytes | None = None


@record
class EmbeddingResult:
    data: list[Any]  # one vector (list of floats) or base64 string per input, in input order
    usage: Usage | None = None
    model: str | None = None
    passthrough: bytes | None = None


Answer = Result | EmbeddingResult
