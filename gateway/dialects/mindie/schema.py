"""MindIE request wire models, with the ranges MindIE's manual gives (docs/dialects/mindie.md).

Native `/infer` and `/infer_token` (column N), the TGI-style routes (column T, extending the TGI
models), the vLLM-style `/generate` body, and the OpenAI-flavoured chat and completions bodies
(extending the OpenAI models with MindIE's wider limits and extra fields). Fields that are
neutral parameters say so (`Carries`), and whether MindIE's native routes (`NATIVE`) or its
OpenAI routes (`OPENAI_ROUTES`) take them when the gateway calls a MindIE server; the TGI-style
and vLLM-style bodies are only read. A native sampling value outside its range is left out when
writing (`in_range`: MindIE refuses a temperature of 0, a top_p of 1 and a top_k of 0 or -1).
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from gateway.codec.fields import Carries
from gateway.codec.validation import OpenModel
from gateway.dialects.openai.schema import ChatCompletionRequest, CompletionRequest, ResponseFormat, Tool
from gateway.dialects.tgi.schema import GenerateRequest, Parameters

I32 = 2**31 - 1
U64 = 2**64 - 1
NATIVE = "native"
OPENAI_ROUTES = "openai"
# A stop string is 1..1024 characters; up to 1024 of them (docs/dialects/mindie.md#openai-flavoured-request-fields).
StopStr = Annotated[str, Field(min_length=1, max_length=1024)]
Stop = StopStr | Annotated[list[StopStr], Field(max_length=1024)] | None


class NativeParameters(OpenModel):
    """`parameters` of /infer and /infer_token, in the manual's order and ranges
    (docs/dialects/mindie.md#native-parameters)."""

    temperature: Annotated[float | None, Field(gt=0), Carries(NATIVE, in_range=True)] = None
    top_k: Annotated[int | None, Field(gt=0, le=I32), Carries(NATIVE, in_range=True)] = None
    top_p: Annotated[float | None, Field(gt=0, lt=1), Carries(NATIVE, in_range=True)] = None
    max_new_tokens: Annotated[int | None, Field(gt=0, le=I32), Carries(NATIVE, param="max_tokens")] = None
    do_sample: Annotated[bool | None, Carries(NATIVE)] = None
    seed: Annotated[int | None, Field(gt=0, le=U64), Carries(NATIVE)] = None
    repetition_penalty: Annotated[float | None, Field(gt=0), Carries(NATIVE)] = None
    details: bool | None = None
    typical_p: Annotated[float | None, Field(gt=0, le=1), Carries(NATIVE, in_range=True)] = None
    watermark: Annotated[bool | None, Carries(NATIVE)] = None
    priority: Annotated[int | None, Field(ge=1, le=5), Carries(NATIVE)] = None
    timeout: Annotated[int | None, Field(gt=0, le=3600), Carries(NATIVE)] = None


# A token id of /infer_token, as the manual gives its range: (1, 1048576].
TOKEN_ID_ABOVE, TOKEN_ID_MAX = 1, 1024 * 1024
TokenId = Annotated[int, Field(gt=TOKEN_ID_ABOVE, le=TOKEN_ID_MAX)]


class InferRequest(OpenModel):
    """/infer (text `inputs`) and /infer_token (`input_id`); one of the two, not both."""

    inputs: str | None = Field(None, min_length=1)
    input_id: Annotated[list[TokenId], Field(min_length=1, max_length=TOKEN_ID_MAX)] | None = None
    stream: bool | None = None
    parameters: NativeParameters | None = None

    @model_validator(mode="after")
    def _one_input(self) -> "InferRequest":
        if self.inputs is not None and self.input_id is not None:
            raise ValueError("Input conflict: give either inputs or input_id, not both")
        if self.inputs is None and self.input_id is None:
            raise ValueError("the request needs inputs (text) or input_id (token ids)")
        return self


class TGIParameters(Parameters):
    """MindIE's TGI-style `parameters` (column T): typical_p may be 1, stop takes MindIE's limits."""

    typical_p: Annotated[float | None, Field(gt=0, le=1), Carries()] = None
    stop: Annotated[Stop, Carries()] = None  # type: ignore[assignment]
    top_k: Annotated[int | None, Field(gt=0, le=I32), Carries()] = None
    max_new_tokens: Annotated[int | None, Field(gt=0, le=I32), Carries(param="max_tokens")] = None
    truncate: Annotated[int | None, Field(gt=0, le=I32), Carries()] = None
    adapter_id: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_./-]{1,256}$")] | None = None


class TGIRequest(GenerateRequest):
    parameters: TGIParameters | None = None


class VllmGenerateRequest(OpenModel):
    """The vLLM-style `/generate` body (told apart from TGI's by a non-null `prompt`)."""

    prompt: str = Field(min_length=1)
    stream: bool | None = None
    max_tokens: Annotated[int | None, Field(gt=0, le=I32), Carries()] = None
    temperature: Annotated[float | None, Field(ge=0), Carries()] = None
    top_k: Annotated[int | None, Field(ge=-1, le=I32), Carries()] = None
    top_p: Annotated[float | None, Field(gt=0, le=1), Carries()] = None
    seed: Annotated[int | None, Field(ge=0, le=U64), Carries()] = None
    repetition_penalty: Annotated[float | None, Field(gt=0), Carries()] = None
    presence_penalty: Annotated[float | None, Field(ge=-2, le=2), Carries()] = None
    frequency_penalty: Annotated[float | None, Field(ge=-2, le=2), Carries()] = None
    stop: Annotated[Stop, Carries()] = None
    stop_token_ids: Annotated[list[int] | None, Carries()] = None
    include_stop_str_in_output: Annotated[bool | None, Carries()] = None
    skip_special_tokens: Annotated[bool | None, Carries()] = None
    ignore_eos: Annotated[bool | None, Carries()] = None
    n: Annotated[int | None, Field(ge=1, le=128), Carries()] = None
    best_of: Annotated[int | None, Field(ge=1, le=128), Carries()] = None
    model: str | None = None


class _MindIEOpenAI(BaseModel):
    """Fields MindIE's OpenAI routes add or widen (docs/dialects/mindie.md#openai-flavoured-request-fields),
    and those they take as OpenAI's vLLM-style extensions, which a MindIE server is sent."""

    max_tokens: Annotated[int | None, Field(ge=1), Carries(OPENAI_ROUTES)] = None
    stop: Annotated[Stop, Carries(OPENAI_ROUTES)] = None
    temperature: Annotated[float | None, Field(ge=0, le=2), Carries(OPENAI_ROUTES)] = None
    top_p: Annotated[float | None, Field(gt=1e-6, le=1), Carries(OPENAI_ROUTES)] = None
    # Seed 004's own example sends 0; it is read as "not set".
    top_k: Annotated[int | None, Field(ge=-1, le=I32), Carries(OPENAI_ROUTES)] = None
    seed: Annotated[int | None, Field(ge=0, le=U64), Carries(OPENAI_ROUTES)] = None
    repetition_penalty: Annotated[float | None, Field(gt=0, le=2), Carries(OPENAI_ROUTES)] = None
    presence_penalty: Annotated[float | None, Field(ge=-2, le=2), Carries(OPENAI_ROUTES)] = None
    frequency_penalty: Annotated[float | None, Field(ge=-2, le=2), Carries(OPENAI_ROUTES)] = None
    stop_token_ids: Annotated[list[int] | None, Carries(OPENAI_ROUTES)] = None
    include_stop_str_in_output: Annotated[bool | None, Carries(OPENAI_ROUTES)] = None
    skip_special_tokens: Annotated[bool | None, Carries(OPENAI_ROUTES)] = None
    ignore_eos: Annotated[bool | None, Carries(OPENAI_ROUTES)] = None
    n: Annotated[int | None, Field(ge=1, le=128), Carries(OPENAI_ROUTES)] = None
    best_of: Annotated[int | None, Field(ge=1, le=128), Carries(OPENAI_ROUTES)] = None
    use_beam_search: bool | None = None


class MindIEChatRequest(_MindIEOpenAI, ChatCompletionRequest):
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: Annotated[ResponseFormat | None, Carries(OPENAI_ROUTES)] = None
    tools: Annotated[list[Tool] | None, Carries(OPENAI_ROUTES)] = None
    tool_choice: Annotated[Literal["none", "auto", "required"] | dict[str, Any] | None, Carries(OPENAI_ROUTES)] = None
    chat_template_kwargs: Annotated[dict[str, Any] | None, Carries(OPENAI_ROUTES)] = None

    @model_validator(mode="after")
    def _checks(self) -> "MindIEChatRequest":
        # MindIE: top_logprobs alone implies logprobs, unlike OpenAI.
        if self.tool_choice not in (None, "none", "auto") and not self.tools:
            raise ValueError("tool_choice requires tools")
        return self


class MindIECompletionRequest(_MindIEOpenAI, CompletionRequest):
    response_format: Annotated[ResponseFormat | None, Carries(OPENAI_ROUTES)] = None
