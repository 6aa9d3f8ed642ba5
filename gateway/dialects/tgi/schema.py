"""TGI request wire models (`{"inputs", "parameters", "stream"}`), fields in the order TGI lists them.

Every field is nullable because the official Python client sends explicit nulls for what the
caller left unset. MindIE's TGI-style routes subclass these with their own ranges.
"""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

U64 = 2**64 - 1


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class Parameters(_Open):
    best_of: int | None = Field(None, gt=0)
    decoder_input_details: bool | None = None
    details: bool | None = None
    do_sample: bool | None = None
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    max_new_tokens: int | None = Field(None, gt=0)
    repetition_penalty: float | None = Field(None, gt=0)
    return_full_text: bool | None = None
    seed: int | None = Field(None, ge=0, le=U64)
    stop: Annotated[list[str], Field(max_length=4)] | None = None
    temperature: float | None = Field(None, gt=0)
    top_k: int | None = Field(None, gt=0)
    top_n_tokens: int | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, lt=1)
    truncate: int | None = Field(None, gt=0)
    typical_p: float | None = Field(None, gt=0, lt=1)
    watermark: bool | None = None
    grammar: dict[str, Any] | None = None
    adapter_id: str | None = None


class GenerateRequest(_Open):
    inputs: str = Field(min_length=1)
    parameters: Parameters | None = None
    stream: bool | None = None
