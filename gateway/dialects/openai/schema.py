"""OpenAI request wire models, fields in the order the API reference lists them.

Validation happens here, at the edge. Unknown fields are allowed (the public API grows, and
vLLM-style servers add their own); the vLLM extensions the gateway understands are declared at
the end of each model so they reach the neutral form.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
NonNegInt = Annotated[int, Field(ge=0)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class FunctionCall(_Open):
    name: str
    arguments: str


class ToolCall(_Open):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ContentPart(_Open):
    type: str

    @model_validator(mode="after")
    def _text_needs_text(self) -> "ContentPart":
        if self.type == "text" and not isinstance(getattr(self, "text", None), str):
            raise ValueError("a text content part needs a string 'text'")
        return self


class ChatMessage(_Open):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _shape(self) -> "ChatMessage":
        if self.role in ("system", "developer", "user") and self.content is None:
            raise ValueError(f"a {self.role} message needs 'content'")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs 'tool_call_id'")
        if self.role == "assistant" and self.content is None and not self.tool_calls:
            raise ValueError("an assistant message needs 'content' or 'tool_calls'")
        return self


class FunctionDef(_Open):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Open):
    type: Literal["function"]
    function: FunctionDef


class ResponseFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _schema(self) -> "ResponseFormat":
        if self.type == "json_schema" and not self.json_schema:
            raise ValueError("response_format of type json_schema needs 'json_schema'")
        return self


class StreamOptions(_Open):
    include_usage: bool | None = None


Stop = str | Annotated[list[str], Field(max_length=4)] | None


class _Sampling(_Open):
    """Fields chat and completions share, plus the vLLM extensions both accept."""

    model: str = Field(min_length=1)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    max_tokens: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1, le=128)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = None
    stop: Stop = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    user: str | None = None
    # vLLM-style extensions
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0)
    stop_token_ids: list[NonNegInt] | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    ignore_eos: bool | None = None
    min_tokens: int | None = Field(None, ge=0)

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for k, b in (v or {}).items():
            if not k.lstrip("-").isdigit() or not -100 <= b <= 100:
                raise ValueError("keys must be token ids and values within [-100, 100]")
        return v

    @model_validator(mode="after")
    def _stream_options(self) -> "_Sampling":
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        return self


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    max_completion_tokens: int | None = Field(None, ge=1)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    # vLLM-style extension
    chat_template_kwargs: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _checks(self) -> "ChatCompletionRequest":
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs to be true")
        if isinstance(self.tool_choice, dict):
            fn = self.tool_choice.get("function")
            if self.tool_choice.get("type") != "function" or not isinstance(fn, dict) or "name" not in fn:
                raise ValueError("tool_choice object must be {type: function, function: {name}}")
            if not any(t.function.name == fn["name"] for t in self.tools or ()):
                raise ValueError(f"tool_choice names function {fn['name']!r}, which is not in tools")
        if self.tool_choice not in (None, "none") and not self.tools:
            raise ValueError("tool_choice requires tools")
        return self


TokenIds = Annotated[list[NonNegInt], Field(min_length=1)]


class CompletionRequest(_Sampling):
    prompt: str | Annotated[list[str], Field(min_length=1)] | TokenIds | Annotated[list[TokenIds], Field(min_length=1)]
    best_of: int | None = Field(None, ge=1, le=20)
    echo: bool | None = None
    # The public API takes up to 5, vLLM-style servers up to their --max-logprobs (20 unless
    # set): the backend knows its own limit and says so.
    logprobs: int | None = Field(None, ge=0)
    suffix: str | None = None


class EmbeddingRequest(_Open):
    model: str = Field(min_length=1)
    input: str | Annotated[list[str], Field(min_length=1)] | TokenIds | Annotated[list[TokenIds], Field(min_length=1)]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None
