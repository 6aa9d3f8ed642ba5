"""Databricks Foundation Model API request wire models, fields in the order its reference lists
them (docs/dialects/databricks.md#request-validation).

Ranges are the reference's. Unknown top-level fields are allowed (the OpenAI SDK adds its own, and
`extra_params`, `client_request_id` and `usage_context` are accepted by the real service);
the sub-objects reuse the OpenAI dialect's pieces where the wire is the same. Fields that are
neutral parameters say so (`Carries`); those a Databricks server takes name its one surface,
`SERVED`. Databricks spells its fields as OpenAI does; it takes fewer of them.
"""

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from gateway.codec.fields import Carries
from gateway.codec.validation import OpenModel
from gateway.dialects.openai.schema import ContentPart, StreamOptions, ToolCall

PositiveInt = Annotated[int, Field(gt=0)]
Stop = str | list[str] | None
SERVED = "served"

MAX_TOOLS = 32
MAX_TOOL_PROPERTIES = 15


class ChatMessage(OpenModel):
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


class FunctionObject(OpenModel):
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


class ToolObject(OpenModel):
    type: Literal["function"]
    function: FunctionObject


class ToolChoiceFunction(OpenModel):
    name: str


class ToolChoiceObject(OpenModel):
    type: Literal["function"]
    function: ToolChoiceFunction


class JsonSchemaObject(OpenModel):
    name: str = Field(min_length=1)
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormatObject(OpenModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaObject | None = None

    @model_validator(mode="after")
    def _schema(self) -> "ResponseFormatObject":
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type json_schema needs 'json_schema'")
        return self


class _Common(OpenModel):
    """Fields chat and completions share, plus the OpenAI-client form's `model`."""

    model: str | None = Field(None, min_length=1)
    max_tokens: Annotated[PositiveInt | None, Carries(SERVED)] = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    temperature: Annotated[float | None, Field(ge=0, le=2), Carries(SERVED)] = None
    top_p: Annotated[float | None, Field(ge=0, le=1), Carries(SERVED)] = None
    top_k: Annotated[PositiveInt | None, Carries(SERVED)] = None
    stop: Annotated[Stop, Carries(SERVED)] = None
    # Databricks documents no upper bound; OpenAI's 128 keeps one request from asking for millions.
    n: Annotated[int | None, Field(gt=0, le=128), Carries(SERVED)] = None
    # Not in Databricks' reference, but sent by OpenAI clients; read as sampling hints, not sent.
    seed: Annotated[int | None, Carries()] = None
    presence_penalty: Annotated[float | None, Field(ge=-2, le=2), Carries()] = None
    frequency_penalty: Annotated[float | None, Field(ge=-2, le=2), Carries()] = None
    user: Annotated[str | None, Carries()] = None
    extra_params: dict[str, Any] | None = None
    client_request_id: str | None = None


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    tool_choice: Annotated[Literal["none", "auto", "required"] | ToolChoiceObject | None, Carries(SERVED)] = None
    tools: Annotated[Annotated[list[ToolObject], Field(max_length=MAX_TOOLS)] | None, Carries(SERVED)] = None
    response_format: Annotated[ResponseFormatObject | None, Carries(SERVED)] = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int | None, Field(ge=0, le=20), Carries(SERVED)] = None

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
    # (Read by the inbound: only "truncate" asks for anything.)
    error_behavior: Annotated[Literal["truncate", "error"] | None, Carries(SERVED, read=False)] = None
    suffix: Annotated[str | None, Carries(SERVED)] = None
    echo: Annotated[bool | None, Carries(SERVED)] = None
    use_raw_prompt: bool | None = None


class EmbeddingRequest(OpenModel):
    model: str | None = Field(None, min_length=1)
    input: str | Annotated[list[str], Field(min_length=1)]
    instruction: Annotated[str | None, Carries(SERVED)] = None
