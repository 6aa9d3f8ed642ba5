"""OpenAI request wire models, fields in the order the API reference lists them.

Validation happens here, at the edge. Unknown fields are allowed (the public API grows, and
vLLM-style servers add their own); the vLLM extensions the gateway understands are declared at
the end of each model so they reach the neutral form. Each field that is a neutral parameter says
so (`Carries`), and which servers take it: the public API (`PUBLIC`) or vLLM-style servers
(`VLLM`: vLLM, SGLang, MindIE's OpenAI routes, LiteLLM). A chat body's `max_completion_tokens` is
the public API's newer name for `max_tokens`, which vLLM-style servers read instead. See
docs/dialects/openai.md.
"""

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from gateway.codec.fields import Carries, PlainJudge
from gateway.codec.validation import OpenModel

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
NonNegInt = Annotated[int, Field(ge=0)]
PUBLIC = "public"
VLLM = "vllm"


class FunctionCall(OpenModel):
    name: str
    arguments: str


class ToolCall(OpenModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ContentPart(OpenModel):
    type: str

    @model_validator(mode="after")
    def _text_needs_text(self) -> "ContentPart":
        if self.type == "text" and not isinstance(getattr(self, "text", None), str):
            raise ValueError("a text content part needs a string 'text'")
        return self


class ChatMessage(OpenModel):
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


class FunctionDef(OpenModel):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(OpenModel):
    type: Literal["function"]
    function: FunctionDef


class ResponseFormat(OpenModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _schema(self) -> "ResponseFormat":
        if self.type == "json_schema" and not self.json_schema:
            raise ValueError("response_format of type json_schema needs 'json_schema'")
        return self


class StreamOptions(OpenModel):
    include_usage: bool | None = None


Stop = str | Annotated[list[str], Field(max_length=4)] | None


class _Sampling(OpenModel):
    """Fields chat and completions share, plus the vLLM extensions both accept."""

    model: str = Field(min_length=1)
    frequency_penalty: Annotated[float | None, Field(ge=-2, le=2), Carries(PUBLIC, VLLM)] = None
    logit_bias: Annotated[dict[str, float] | None, Carries(PUBLIC, VLLM)] = None
    max_tokens: Annotated[int | None, Field(ge=1), Carries(PUBLIC, VLLM)] = None
    n: Annotated[int | None, Field(ge=1, le=128), Carries(PUBLIC, VLLM)] = None
    presence_penalty: Annotated[float | None, Field(ge=-2, le=2), Carries(PUBLIC, VLLM)] = None
    seed: Annotated[int | None, Carries(PUBLIC, VLLM)] = None
    stop: Annotated[Stop, Carries(PUBLIC, VLLM)] = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    temperature: Annotated[float | None, Field(ge=0, le=2), Carries(PUBLIC, VLLM)] = None
    top_p: Annotated[float | None, Field(ge=0, le=1), Carries(PUBLIC, VLLM)] = None
    user: Annotated[str | None, Carries(PUBLIC, VLLM)] = None
    # vLLM-style extensions
    top_k: Annotated[int | None, Field(ge=-1), Carries(VLLM)] = None
    min_p: Annotated[float | None, Field(ge=0, le=1), Carries(VLLM)] = None
    repetition_penalty: Annotated[float | None, Field(gt=0), Carries(VLLM)] = None
    stop_token_ids: Annotated[list[NonNegInt] | None, Carries(VLLM)] = None
    include_stop_str_in_output: Annotated[bool | None, Carries(VLLM)] = None
    skip_special_tokens: Annotated[bool | None, Carries(VLLM)] = None
    ignore_eos: Annotated[bool | None, Carries(VLLM)] = None
    min_tokens: Annotated[int | None, Field(ge=0), Carries(VLLM)] = None

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
    top_logprobs: Annotated[int | None, Field(ge=0, le=20), Carries()] = None  # sent with logprobs
    max_completion_tokens: Annotated[int | None, Field(ge=1), Carries(PUBLIC, param="max_tokens", wins=True)] = None
    response_format: Annotated[ResponseFormat | None, Carries(PUBLIC, VLLM)] = None
    tools: Annotated[list[Tool] | None, Carries(PUBLIC, VLLM)] = None
    tool_choice: Annotated[Literal["none", "auto", "required"] | dict[str, Any] | None, Carries(PUBLIC, VLLM)] = None
    parallel_tool_calls: Annotated[bool | None, Carries(PUBLIC, VLLM)] = None
    reasoning_effort: Annotated[str | None, Carries(PUBLIC, VLLM)] = None
    # vLLM-style extension
    chat_template_kwargs: Annotated[dict[str, Any] | None, Carries(VLLM)] = None

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
    # (echo and best_of are read by the inbound: only some of their values count.)
    best_of: Annotated[int | None, Field(ge=1, le=20), Carries(PUBLIC, VLLM, read=False)] = None
    echo: Annotated[bool | None, Carries(PUBLIC, VLLM, read=False)] = None
    # The public API takes up to 5, vLLM-style servers up to their --max-logprobs (20 unless
    # set): the backend knows its own limit and says so.
    logprobs: int | None = Field(None, ge=0)
    suffix: Annotated[str | None, Carries(PUBLIC, VLLM)] = None
    # vLLM-style extension (the public API's completions have no response format)
    response_format: Annotated[ResponseFormat | None, Carries(VLLM)] = None


class EmbeddingRequest(OpenModel):
    model: str = Field(min_length=1)
    input: str | Annotated[list[str], Field(min_length=1)] | TokenIds | Annotated[list[TokenIds], Field(min_length=1)]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: Annotated[int | None, Field(ge=1), Carries(PUBLIC, VLLM)] = None
    user: Annotated[str | None, Carries(PUBLIC, VLLM)] = None


# ---- the plain chat request, judged without building a model -------------------------------
#
# Most chat requests are a model, a few sampling numbers, perhaps function tools, and messages of
# text, tool calls and tool results (an agent's turns). For those, a look at each value's type and
# range says all that ChatCompletionRequest would; pydantic builds a model for what this cannot
# judge (a named tool choice, content parts, anything out of range), so a refused request's error
# is always pydantic's. This never accepts what the model refuses (tests/test_openai_plain_chat.py
# holds the two against each other).


def _stream_options(v: object) -> bool:
    # Its "stream must be true" rule is looked at with the whole request.
    return v is None or (type(v) is dict and type(v.get("include_usage")) in (bool, type(None)))


def _optional(v: object, kind: type) -> bool:
    return v is None or type(v) is kind


def _function_tool(v: object) -> bool:
    """A Tool as the model takes it: a function with a name of 1 to 64 characters."""
    if type(v) is not dict or v.get("type") != "function":
        return False
    fn = v.get("function")
    if type(fn) is not dict:
        return False
    name = fn.get("name")
    return (
        type(name) is str
        and 0 < len(name) <= 64
        and _optional(fn.get("description"), str)
        and _optional(fn.get("parameters"), dict)
        and _optional(fn.get("strict"), bool)
    )


def _tools(v: object) -> bool:
    return v is None or (type(v) is list and all(map(_function_tool, v)))


def _tool_choice(v: object) -> bool:
    # An object names a function, which the model checks against the tools.
    return v is None or (type(v) is str and v in ("none", "auto", "required"))


# Each field's check comes from its type and bounds; the models among them have their own.
# Declared fields with no check (response_format, logit_bias) are left to the model unless null;
# undeclared ones are extras, which the model takes as they are.
_PLAIN = PlainJudge(
    ChatCompletionRequest,
    skip=("messages",),
    own={"stream_options": _stream_options, "tools": _tools, "tool_choice": _tool_choice},
)
_PLAIN_FIELDS = _PLAIN.checks
# The message fields judged here; any other the model declares must be absent or null.
_MESSAGE_OTHERS = tuple(frozenset(ChatMessage.model_fields) - {"role", "content", "name", "tool_calls", "tool_call_id"})
_TEXT_ROLES = frozenset({"system", "developer", "user", "assistant"})


def _plain_call(call: object) -> bool:
    """A ToolCall as the model takes it: an id, a function's name and its arguments as text."""
    if type(call) is not dict or type(call.get("id")) is not str or call.get("type", "function") != "function":
        return False
    fn = call.get("function")
    return type(fn) is dict and type(fn.get("name")) is str and type(fn.get("arguments")) is str


def _plain_message(msg: object) -> bool:
    """A text message of a system, developer, user or assistant, an assistant's tool calls (with
    or without text), or a tool's text result: no content parts."""
    if type(msg) is not dict:
        return False
    role, content, name = msg.get("role"), msg.get("content"), msg.get("name")
    calls, call_id = msg.get("tool_calls"), msg.get("tool_call_id")
    if (name is not None and type(name) is not str) or any(msg.get(k) is not None for k in _MESSAGE_OTHERS):
        return False
    if role == "tool":
        return type(content) is str and type(call_id) is str and call_id != "" and calls is None
    if type(role) is not str or role not in _TEXT_ROLES or call_id is not None:
        return False
    if calls is None:
        return type(content) is str
    return (
        role == "assistant"
        and type(calls) is list
        and (type(content) is str or (content is None and len(calls) > 0))
        and all(map(_plain_call, calls))
    )


def plain_chat(data: dict[str, Any]) -> bool:
    """True when ChatCompletionRequest would accept `data` as it is and cheap checks can tell;
    False means "ask the model", not "invalid"."""
    messages = data.get("messages")
    if type(messages) is not list or not messages or not _PLAIN(data):
        return False
    if data.get("stream_options") is not None and not data.get("stream"):
        return False
    if data.get("top_logprobs") is not None and not data.get("logprobs"):
        return False
    if data.get("tool_choice") not in (None, "none") and not data.get("tools"):
        return False
    return all(map(_plain_message, messages))
