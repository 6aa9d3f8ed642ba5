"""MindIE request wire models, with the ranges MindIE's manual gives (docs/dialects/mindie.md).

Native `/infer` and `/infer_token` (column N), the TGI-style routes (column T, extending the TGI
models), the vLLM-style `/generate` body, and the OpenAI-flavoured chat and completions bodies
(extending the OpenAI models with MindIE's wider limits and extra fields).
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.dialects.openai.schema import ChatCompletionRequest, CompletionRequest
from gateway.dialects.tgi.schema import GenerateRequest, Parameters

I32 = 2**31 - 1
U64 = 2**64 - 1
# A stop string is 1..1024 characters; up to 1024 of them (docs/dialects/mindie.md#openai-flavoured-request-fields).
StopStr = Annotated[str, Field(min_length=1, max_length=1024)]
Stop = StopStr | Annotated[list[StopStr], Field(max_length=1024)] | None


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class NativeParameters(_Open):
    """`parameters` of /infer and /infer_token, in the manual's order and ranges
    (docs/dialects/mindie.md#native-parameters)."""

    temperature: float | None = Field(None, gt=0)
    top_k: int | None = Field(None, gt=0, le=I32)
    top_p: float | None = Field(None, gt=0, lt=1)
    max_new_tokens: int | None = Field(None, gt=0, le=I32)
    do_sample: bool | None = None
    seed: int | None = Field(None, gt=0, le=U64)
    repetition_penalty: float | None = Field(None, gt=0)
    details: bool | None = None
    typical_p: float | None = Field(None, gt=0, le=1)
    watermark: bool | None = None
    priority: int | None = Field(None, ge=1, le=5)
    timeout: int | None = Field(None, gt=0, le=3600)


# A token id of /infer_token, as the manual gives its range: (1, 1048576].
TOKEN_ID_ABOVE, TOKEN_ID_MAX = 1, 1024 * 1024
TokenId = Annotated[int, Field(gt=TOKEN_ID_ABOVE, le=TOKEN_ID_MAX)]


class InferRequest(_Open):
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

    typical_p: float | None = Field(None, gt=0, le=1)
    stop: Stop = None  # type: ignore[assignment]
    top_k: int | None = Field(None, gt=0, le=I32)
    max_new_tokens: int | None = Field(None, gt=0, le=I32)
    truncate: int | None = Field(None, gt=0, le=I32)
    adapter_id: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_./-]{1,256}$")] | None = None


class TGIRequest(GenerateRequest):
    parameters: TGIParameters | None = None


class VllmGenerateRequest(_Open):
    """The vLLM-style `/generate` body (told apart from TGI's by a non-null `prompt`)."""

    prompt: str = Field(min_length=1)
    stream: bool | None = None
    max_tokens: int | None = Field(None, gt=0, le=I32)
    temperature: float | None = Field(None, ge=0)
    top_k: int | None = Field(None, ge=-1, le=I32)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = Field(None, ge=0, le=U64)
    repetition_penalty: float | None = Field(None, gt=0)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    stop: Stop = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    ignore_eos: bool | None = None
    n: int | None = Field(None, ge=1, le=128)
    best_of: int | None = Field(None, ge=1, le=128)
    model: str | None = None


class _MindIEOpenAI(BaseModel):
    """Fields MindIE's OpenAI routes add or widen (docs/dialects/mindie.md#openai-flavoured-request-fields)."""

    stop: Stop = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=1e-6, le=1)
    # Seed 004's own example sends 0; it is read as "not set".
    top_k: int | None = Field(None, ge=-1, le=I32)
    seed: int | None = Field(None, ge=0, le=U64)
    repetition_penalty: float | None = Field(None, gt=0, le=2)
    stop_token_ids: list[int] | None = None
    n: int | None = Field(None, ge=1, le=128)
    best_of: int | None = Field(None, ge=1, le=128)
    use_beam_search: bool | None = None


class MindIEChatRequest(_MindIEOpenAI, ChatCompletionRequest):
    top_logprobs: int | None = Field(None, ge=0, le=20)
    chat_template_kwargs: dict[str, Any] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None

    @model_validator(mode="after")
    def _checks(self) -> "MindIEChatRequest":
        # MindIE: top_logprobs alone implies logprobs, unlike OpenAI.
        if self.tool_choice not in (None, "none", "auto") and not self.tools:
            raise ValueError("tool_choice requires tools")
        return self


class MindIECompletionRequest(_MindIEOpenAI, CompletionRequest):
    pass
