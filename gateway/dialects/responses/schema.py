"""The Responses API's request bodies as validated wire models: the create body, its input items,
its tools. Fields in the order the API reference lists them.

Unknown fields are allowed (the API grows, and clients such as Codex send fields of their own);
item and tool types the gateway does not translate are kept as they are, for a backend that
serves the Responses API itself, and dealt with where a request is translated. See
docs/dialects/responses.md.
"""

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from gateway.codec.fields import Carries, PlainJudge
from gateway.codec.validation import OpenModel as _Open

Role = Literal["user", "assistant", "system", "developer"]
# The one server surface: the Responses API (OpenAI's own, vLLM's /v1/responses).
RESPONSES = "responses"


# ---- content parts -------------------------------------------------------------------------

_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


class ContentPart(_Open):
    type: str

    @model_validator(mode="after")
    def _shape(self) -> "ContentPart":
        extra = self.model_extra or {}
        if self.type in _TEXT_PARTS and not isinstance(extra.get("text"), str):
            raise ValueError(f"a {self.type} part needs a string 'text'")
        if self.type == "refusal" and not isinstance(extra.get("refusal"), str):
            raise ValueError("a refusal part needs a string 'refusal'")
        if self.type == "input_image" and not isinstance(extra.get("image_url"), str):
            raise ValueError("an input_image part needs 'image_url' (a URL or a data URL); file ids are not served")
        return self


# ---- input items ---------------------------------------------------------------------------


class MessageItem(_Open):
    type: Literal["message"] = "message"
    role: Role
    content: str | list[ContentPart]


class FunctionCallItem(_Open):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    namespace: str | None = None


class FunctionCallOutputItem(_Open):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[ContentPart]


class CustomToolCallItem(_Open):
    type: Literal["custom_tool_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: str
    namespace: str | None = None


class CustomToolCallOutputItem(_Open):
    type: Literal["custom_tool_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[ContentPart]


class ReasoningItem(_Open):
    type: Literal["reasoning"]
    summary: list[ContentPart] = Field(default_factory=list)
    content: list[ContentPart] | None = None


class OtherItem(_Open):
    """An item of a tool the provider runs (web_search_call ...), an item reference, or one the
    gateway does not know: kept for a backend of the Responses API, left out of a translation."""

    type: str


# The item kinds the gateway translates.
TRANSLATED = ("message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output")


def _item_kind(value: Any) -> str:
    kind = value.get("type", "message") if isinstance(value, dict) else "message"
    return kind if kind in (*TRANSLATED, "reasoning") else "other"


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[CustomToolCallItem, Tag("custom_tool_call")]
    | Annotated[CustomToolCallOutputItem, Tag("custom_tool_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_item_kind),
]


# ---- tools ---------------------------------------------------------------------------------


class FunctionTool(_Open):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class CustomTool(_Open):
    """A freeform tool: the model's call is one string (`input`), shaped by `format`."""

    type: Literal["custom"]
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    format: dict[str, Any] | None = None


_InnerTool = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[CustomTool, Tag("custom")],
    Discriminator(lambda v: v.get("type") if isinstance(v, dict) else None),
]


class NamespaceTool(_Open):
    """Function and custom tools grouped under a name the model's calls carry (`namespace`)."""

    type: Literal["namespace"]
    name: str = Field(min_length=1)
    description: str | None = None
    tools: list[_InnerTool]


class ServerTool(_Open):
    """A tool the API provider runs itself (web_search, file_search, mcp, code_interpreter...)."""

    type: str


def _tool_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if kind in ("function", "custom", "namespace") else "server"


Tool = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[CustomTool, Tag("custom")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[ServerTool, Tag("server")],
    Discriminator(_tool_kind),
]


# ---- the create body -----------------------------------------------------------------------


class TextFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema(self) -> "TextFormat":
        if self.type == "json_schema" and (not self.name or self.schema_ is None):
            raise ValueError("a json_schema format needs 'name' and 'schema'")
        return self


class TextConfig(_Open):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(_Open):
    effort: str | None = None
    summary: str | None = None


class StreamOptions(_Open):
    include_obfuscation: bool | None = None


class ResponsesRequest(_Open):
    model: str = Field(min_length=1)
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    background: bool | None = None
    include: list[str] | None = None
    max_output_tokens: Annotated[int | None, Field(ge=1), Carries(RESPONSES, param="max_tokens")] = None
    max_tool_calls: int | None = Field(None, ge=1)
    metadata: Annotated[dict[str, str], Field(max_length=16)] | None = None
    parallel_tool_calls: Annotated[bool | None, Carries(RESPONSES)] = None
    previous_response_id: str | None = None
    prompt_cache_key: str | None = None
    reasoning: ReasoningConfig | None = None
    safety_identifier: Annotated[str | None, Carries(param="user")] = None  # `user`'s newer name
    service_tier: str | None = None
    store: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    temperature: Annotated[float | None, Field(ge=0, le=2), Carries(RESPONSES)] = None
    text: TextConfig | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    tools: list[Tool] | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    top_p: Annotated[float | None, Field(ge=0, le=1), Carries(RESPONSES)] = None
    truncation: Literal["auto", "disabled"] | None = None
    user: Annotated[str | None, Carries(RESPONSES, wins=True)] = None

    @model_validator(mode="after")
    def _checks(self) -> "ResponsesRequest":
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        return self


class InputTokensRequest(_Open):
    """The body of POST /v1/responses/input_tokens: what a create body says of the input."""

    model: str = Field(min_length=1)
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    tools: list[Tool] | None = None
    previous_response_id: str | None = None


# A create body that is a model, a text input and settings of simple types is judged by a look at
# each value (as a chat body is: gateway.dialects.openai.schema.plain_chat); anything else (input
# items, tools, text and reasoning settings) by the model, whose error a refused body gets.
_PLAIN = PlainJudge(ResponsesRequest, skip=("input",))


def plain_request(data: dict[str, Any]) -> bool:
    """True when ResponsesRequest would take `data` as it is and cheap checks can tell; False
    means "ask the model", not "invalid"."""
    return type(data.get("input")) is str and _PLAIN(data)
