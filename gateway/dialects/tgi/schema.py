"""TGI request wire models (`{"inputs", "parameters", "stream"}`), fields in the order TGI lists them.

Every field is nullable because the official Python client sends explicit nulls for what the
caller left unset. MindIE's TGI-style routes subclass these with their own ranges. Fields that
are neutral parameters say so (`Carries`), all sent to a TGI server (`TGI`); the ranges are
TGI's, and a sampling value outside them is left out when writing for it (`in_range`: a top_k
of 0 or -1, or a top_p of 1, means "off" elsewhere and is refused by TGI). See docs/dialects/tgi.md.
"""

from typing import Annotated, Any

from pydantic import Field

from gateway.codec.fields import Carries
from gateway.codec.validation import OpenModel

U64 = 2**64 - 1
TGI = "tgi"


class Parameters(OpenModel):
    best_of: Annotated[int | None, Field(gt=0), Carries(TGI)] = None
    decoder_input_details: bool | None = None
    details: bool | None = None
    do_sample: Annotated[bool | None, Carries(TGI)] = None
    frequency_penalty: Annotated[float | None, Field(ge=-2, le=2), Carries(TGI)] = None
    max_new_tokens: Annotated[int | None, Field(gt=0), Carries(TGI, param="max_tokens")] = None
    repetition_penalty: Annotated[float | None, Field(gt=0), Carries(TGI)] = None
    return_full_text: bool | None = None
    seed: Annotated[int | None, Field(ge=0, le=U64), Carries(TGI)] = None
    stop: Annotated[Annotated[list[str], Field(max_length=4)] | None, Carries(TGI)] = None
    temperature: Annotated[float | None, Field(gt=0), Carries(TGI, in_range=True)] = None
    top_k: Annotated[int | None, Field(gt=0), Carries(TGI, in_range=True)] = None
    top_n_tokens: int | None = Field(None, ge=0)
    top_p: Annotated[float | None, Field(gt=0, lt=1), Carries(TGI, in_range=True)] = None
    truncate: Annotated[int | None, Field(gt=0), Carries(TGI)] = None
    typical_p: Annotated[float | None, Field(gt=0, lt=1), Carries(TGI, in_range=True)] = None
    watermark: Annotated[bool | None, Carries(TGI)] = None
    # A JSON grammar is a response format (read and written by hand: gateway.codec.structured).
    grammar: Annotated[dict[str, Any] | None, Carries(param="response_format", read=False)] = None
    adapter_id: str | None = None


class GenerateRequest(OpenModel):
    inputs: str = Field(min_length=1)
    parameters: Parameters | None = None
    stream: bool | None = None
