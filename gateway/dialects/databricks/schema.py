"""Databricks Foundation Model API request wire models, fields in the order its reference lists
them (docs/dialects/databricks.md#request-validation).

Ranges are the reference's. Unknown top-level fields are allowed (the OpenAI SDK adds its own, and
`extra_params`, `client_request_id` and `usage_context` are accepted by the real service);
the sub-objects reuse the OpenAI dialect's pieces where the wire is the same.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.dialects.openai.schema import ContentPart, StreamOptions, ToolCall

PositiveInt = Annotated[int, Field(gt=0)]
Stop = str | list[str] | None

MAX_TOOLS = 32
MAX_TOOL_PROPERTIES = 15


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class ChatMessage(_Open):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _shape(self) -> "ChatMessage":
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only an assistant message may carry 'tool_calls'")
        if self.role == "tool":
            if not self.tool_call_id:
                raise ValueError("a tool message needs 'tool_call_id'")
        elif self.tool_call_id:
            raise ValueError("'tool_call_id' must be empty unless role is 'tool'")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs 'content'")
        return self


class FunctionObject(_Open):
    name: str = Field(min_length=1)
    description: str
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _properties(self) -> "FunctionObject":
        props = (self.parameters or {}).get("properties")
        if isinstance(props, dict) and len(props) > MAX_TOOL_PROPERTIES:
            raise ValueError(f"parameters may have at most {MAX_TOOL_PROPERTIES} properties")
        return self


class ToolObject(_Open):
    type: Literal["function"]
    function: FunctionObject


class ToolChoiceFunction(_Open):
    name: str


class ToolChoiceObject(_Open):
    type: Literal["function"]
    function: ToolChoiceFunction


class JsonSchemaObject(_Open):
    name: str = Field(min_length=1)
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormatObject(_Open):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaObject | None = None

    @model_validator(mode="after")
    def _schema(self) -> "ResponseFormatObject":
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type json_schema needs 'json_schema'")
        return self


class _Common(_Open):
    """Fields chat and completions share, plus the OpenAI-client form's `model`."""

    model: str | None = Field(None, min_length=1)
    max_tokens: PositiveInt | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: PositiveInt | None = None
    stop: Stop = None
    # Databricks documents no upper bound; OpenAI's 128 keeps one request from asking for millions.
    n: int | None = Field(None, gt=0, le=128)
    # Not in Databricks' reference, but sent by OpenAI clients; carried as sampling hints.
    seed: int | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    user: str | None = None
    extra_params: dict[str, Any] | None = None
    client_request_id: str | None = None


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceObject | None = None
    tools: Annotated[list[ToolObject], Field(max_length=MAX_TOOLS)] | None = None
    response_format: ResponseFormatObject | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)

    @model_validator(mode="after")
    def _checks(self) -> "ChatRequest":
        for i, m in enumerate(self.messages):
            if m.role == "system" and i != 0:
                raise ValueError("a system message may appear only once, as the first message")
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs to be true")
        if self.tool_choice not in (None, "none") and not self.tools:
            raise ValueError("tool_choice requires tools")
        if isinstance(self.tool_choice, ToolChoiceObject):
            name = self.tool_choice.function.name
            if not any(t.function.name == name for t in self.tools or ()):
                raise ValueError(f"tool_choice names function {name!r}, which is not in tools")
        return self


class CompletionRequest(_Common):
    prompt: str | Annotated[list[str], Field(min_length=1)]
    error_behavior: Literal["truncate", "error"] | None = None
    suffix: str | None = None
    echo: bool | None = None
    use_raw_prompt: bool | None = None


class EmbeddingRequest(_Open):
    model: str | None = Field(None, min_length=1)
    input: str | Annotated[list[str], Field(min_length=1)]
    instruction: str | None = None
