"""Anthropic Messages request wire models, fields in the order the API reference lists them.

Validation happens here, at the edge. Unknown fields are allowed at every level: the API grows
(`context_management`, `output_config`, `container`, `service_tier`...) and a client such as
Claude Code sends what its betas add; the gateway reads what it carries to a backend and leaves
the rest (docs/dialects/anthropic.md says what that is).
"""

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from gateway.codec.fields import Carries, PlainJudge
from gateway.codec.validation import OpenModel

# The one server surface: the Messages API (Anthropic's own, vLLM's /v1/messages).
MESSAGES = "messages"


class TextBlock(OpenModel):
    type: Literal["text"]
    text: str


class Base64Source(OpenModel):
    type: Literal["base64"]
    media_type: str = Field(min_length=1)
    data: str


class UrlSource(OpenModel):
    type: Literal["url"]
    url: str = Field(min_length=1)


class ImageBlock(OpenModel):
    type: Literal["image"]
    source: Annotated[Base64Source | UrlSource, Field(discriminator="type")]


class ToolUseBlock(OpenModel):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class ToolResultBlock(OpenModel):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] | None = None
    is_error: bool | None = None


class ThinkingBlock(OpenModel):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(OpenModel):
    type: Literal["redacted_thinking"]
    data: str


# The blocks a self-hosted backend can be given; any other type (documents, search results,
# server tool results) is refused with its name.
Block = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]
BLOCK_TYPES = ("text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking")


class MessageParam(OpenModel):
    # "system" mid-conversation: Claude Code sends such turns (a beta of the API).
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]

    @model_validator(mode="before")
    @classmethod
    def _known_blocks(cls, data: Any) -> Any:
        content = data.get("content") if isinstance(data, dict) else None
        for block in content if isinstance(content, list) else ():
            kind = block.get("type") if isinstance(block, dict) else None
            if kind not in BLOCK_TYPES:
                raise ValueError(f"content blocks of type {kind!r} cannot be carried (only {', '.join(BLOCK_TYPES)})")
        return data


class Metadata(OpenModel):
    user_id: str | None = None


class Tool(OpenModel):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _client_tool(cls, data: Any) -> Any:
        kind = data.get("type") if isinstance(data, dict) else None
        if kind not in (None, "custom"):
            raise ValueError(f"{kind!r} is one of the API's server tools, which the gateway's backends cannot run")
        return data


class ToolChoice(OpenModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _named(self) -> "ToolChoice":
        if self.type == "tool" and not self.name:
            raise ValueError("a tool_choice of type tool needs 'name'")
        return self


class Thinking(OpenModel):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _budget(self) -> "Thinking":
        if self.type == "enabled" and self.budget_tokens is None:
            raise ValueError("thinking of type enabled needs 'budget_tokens'")
        return self


class _Conversation(OpenModel):
    """What a Messages request and a token count share."""

    model: str = Field(min_length=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    thinking: Thinking | None = None
    tool_choice: ToolChoice | None = None
    tools: list[Tool] | None = None

    @model_validator(mode="after")
    def _tools(self) -> "_Conversation":
        choice = self.tool_choice
        if choice is not None and choice.type == "tool" and not any(t.name == choice.name for t in self.tools or ()):
            raise ValueError(f"tool_choice names tool {choice.name!r}, which is not in tools")
        return self


class MessagesRequest(_Conversation):
    max_tokens: Annotated[int, Field(ge=1), Carries(MESSAGES)]
    metadata: Metadata | None = None
    stop_sequences: Annotated[list[str] | None, Carries(MESSAGES, param="stop")] = None
    stream: bool | None = None
    temperature: Annotated[float | None, Field(ge=0, le=1), Carries(MESSAGES)] = None
    top_k: Annotated[int | None, Field(ge=0), Carries(MESSAGES)] = None
    top_p: Annotated[float | None, Field(ge=0, le=1), Carries(MESSAGES)] = None


class CountTokensRequest(_Conversation):
    pass


# A request of text turns, a text system prompt and settings of simple types is judged by a look
# at each value (as a chat body is: gateway.dialects.openai.schema.plain_chat); anything else
# (content blocks, tools, thinking) by the model, whose error a refused request gets.
_PLAIN = PlainJudge(MessagesRequest, skip=("messages",), own={"system": lambda v: v is None or type(v) is str})
_ROLES = frozenset(("user", "assistant", "system"))


def _text_turn(msg: object) -> bool:
    if type(msg) is not dict or type(msg.get("content")) is not str:
        return False
    role = msg.get("role")
    return type(role) is str and role in _ROLES


def plain_messages(data: dict[str, Any]) -> bool:
    """True when MessagesRequest would take `data` as it is and cheap checks can tell; False
    means "ask the model", not "invalid"."""
    messages = data.get("messages")
    return type(messages) is list and bool(messages) and _PLAIN(data) and all(map(_text_turn, messages))
