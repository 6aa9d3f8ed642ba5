"""Triton generate wire models: the request's parameters, the backend options, model metadata.

Triton treats every key of a generate body other than `id`, `text_input` and `parameters` the
same as a key inside `parameters`, so both are merged before validation. Parameter values must
be scalars, as Triton demands of request parameters; only the list-valued tensors LLM backends
declare (stop and bad words) may be arrays. The vLLM backend's `sampling_parameters` is a string
holding a JSON object; its keys join the parameters (and may hold lists, such as `stop`).

Fields that are neutral parameters say so (`Carries`), with the backend families that take them
and their names there: TRT-LLM's ensemble (`TRTLLM`, input tensors at the top level of the body),
Triton's vLLM backend (`VLLM`, inside `sampling_parameters`) and MindIE's variant (`MINDIE`, under
`parameters` by MindIE's native names, with MindIE's ranges). Fields marked `Tensor` are the
inputs the gateway's own generate route describes in its model metadata.
"""

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from gateway import jsonutil
from gateway.codec.fields import Carries, Tensor, tensor_inputs
from gateway.codec.validation import OpenModel
from gateway.neutral.errors import InvalidRequest

TRTLLM = "trtllm"
VLLM = "vllm"
MINDIE = "mindie"
I32 = 2**31 - 1
RESERVED = ("id", "text_input", "parameters")
# Inputs that TRT-LLM declares as string tensors of dynamic length: lists are legal there.
LIST_INPUTS = frozenset({"stop_words", "bad_words", "stop"})
# The vLLM backend's input tensors besides text_input: they stay when `sampling_parameters`
# replaces the request parameters.
VLLM_TENSORS = frozenset(
    {
        "stream",
        "exclude_input_in_output",
        "return_finish_reason",
        "return_cumulative_logprob",
        "return_logprobs",
        "return_num_input_tokens",
        "return_num_output_tokens",
        "image",
        "embedding_request",
    }
)
# What `sampling_parameters` does: join the parameters, its keys winning (the gateway's own
# inbound), replace them (the vLLM backend), or nothing (servers that do not know it).
SamplingMode = Literal["merge", "only", "ignore"]


def _alias(*names: str) -> Any:
    return AliasChoices(*names)


class GenerateParameters(BaseModel):
    """The parameters the gateway understands, under the names Triton LLM backends use.

    Names no backend family uses are ignored, as a Triton model ignores parameters it does not
    read. Aliases cover TRT-LLM (`random_seed`, `runtime_top_k`), the vLLM backend (`seed`,
    `stop`) and MindIE's variant (`max_new_tokens`). The fields are in the order in which the
    vLLM backend's `sampling_parameters` string is written.
    """

    model_config = ConfigDict(extra="ignore", strict=True)

    max_tokens: Annotated[int | None, Carries(TRTLLM, VLLM), Tensor()] = Field(
        None, ge=1, validation_alias=_alias("max_tokens", "max_new_tokens")
    )
    temperature: Annotated[float | None, Field(ge=0), Carries(TRTLLM, VLLM), Tensor()] = None
    top_p: Annotated[float | None, Carries(TRTLLM, VLLM), Tensor()] = Field(
        None, ge=0, le=1, validation_alias=_alias("top_p", "runtime_top_p")
    )
    top_k: Annotated[int | None, Carries(TRTLLM, VLLM), Tensor()] = Field(
        None, ge=-1, validation_alias=_alias("top_k", "runtime_top_k")
    )
    min_p: Annotated[float | None, Field(ge=0, le=1), Carries(VLLM), Tensor()] = None
    typical_p: Annotated[float | None, Field(gt=0, le=1), Carries(), Tensor()] = None
    presence_penalty: Annotated[float | None, Carries(TRTLLM, VLLM), Tensor()] = None
    frequency_penalty: Annotated[float | None, Carries(TRTLLM, VLLM), Tensor()] = None
    repetition_penalty: Annotated[float | None, Field(gt=0), Carries(TRTLLM, VLLM), Tensor()] = None
    # Read by the inbound (empty words mean none), as are bad words and the beam width.
    stop: Annotated[str | list[str] | None, Carries(VLLM, trtllm="stop_words", read=False), Tensor()] = Field(
        None, validation_alias=_alias("stop_words", "stop")
    )
    bad_words: Annotated[str | list[str] | None, Carries(TRTLLM, read=False), Tensor()] = None
    # Only reachable through `sampling_parameters` (a list is not a legal request parameter).
    stop_token_ids: Annotated[list[int] | None, Carries(VLLM)] = None
    include_stop_str_in_output: Annotated[bool | None, Carries(VLLM)] = None
    skip_special_tokens: Annotated[bool | None, Carries(VLLM)] = None
    ignore_eos: Annotated[bool | None, Carries(VLLM)] = None
    min_tokens: Annotated[int | None, Field(ge=0), Carries(VLLM), Tensor()] = None
    seed: Annotated[int | None, Carries(VLLM, trtllm="random_seed"), Tensor("UINT64")] = Field(
        None, ge=0, validation_alias=_alias("random_seed", "seed")
    )
    beam_width: Annotated[int | None, Field(ge=1), Carries(TRTLLM, read=False), Tensor()] = None
    n: int | None = Field(None, ge=1, validation_alias=_alias("num_return_sequences", "n"))
    do_sample: Annotated[bool | None, Carries()] = None
    exclude_input_in_output: Annotated[bool | None, Tensor()] = None
    # vLLM backend outputs a client may ask for.
    return_finish_reason: Annotated[bool | None, Tensor()] = None
    return_num_input_tokens: Annotated[bool | None, Tensor()] = None
    return_num_output_tokens: Annotated[bool | None, Tensor()] = None
    # Structured output, read by the inbound: TRT-LLM's guided decoding inputs, and the vLLM
    # backend's sampling parameter (a string holding an object; `guided_decoding` before 25.11).
    guided_decoding_guide_type: Annotated[str | None, Carries(param="response_format", read=False), Tensor()] = None
    guided_decoding_guide: Annotated[str | None, Tensor()] = None
    structured_outputs: str | dict[str, Any] | None = Field(
        None, validation_alias=_alias("structured_outputs", "guided_decoding")
    )
    # TRT-LLM's log probabilities, and MindIE's details (both read only by a simulated server).
    return_log_probs: bool | None = None
    details: bool | None = None
    # Streaming is chosen by the URL; the flag is accepted and ignored.
    stream: Annotated[bool | None, Tensor()] = None


class MindIEParameters(OpenModel):
    """`parameters` of MindIE's Triton-style route, by MindIE's native names
    (docs/dialects/mindie.md#triton-style-route): what the gateway writes for flavor mindie, not
    what it reads. A sampling value outside MindIE's range is left out (`in_range`): MindIE
    refuses a temperature of 0 (greedy is said with do_sample), a top_p of 1 and a top_k of 0."""

    max_new_tokens: Annotated[int | None, Carries(MINDIE, param="max_tokens")] = None
    do_sample: Annotated[bool | None, Carries()] = None  # set by outbound.mindie_body
    temperature: Annotated[float | None, Field(gt=0), Carries(MINDIE, in_range=True)] = None
    top_k: Annotated[int | None, Field(gt=0, le=I32), Carries(MINDIE, in_range=True)] = None
    top_p: Annotated[float | None, Field(gt=0, lt=1), Carries(MINDIE, in_range=True)] = None
    seed: Annotated[int | None, Carries(MINDIE)] = None
    repetition_penalty: Annotated[float | None, Carries(MINDIE)] = None
    typical_p: Annotated[float | None, Carries(MINDIE)] = None
    watermark: Annotated[bool | None, Carries(MINDIE)] = None
    priority: Annotated[int | None, Carries(MINDIE)] = None
    timeout: Annotated[int | None, Carries(MINDIE)] = None


def sampling_parameters(value: Any) -> dict[str, Any]:
    """The object inside the vLLM backend's `sampling_parameters` string."""
    if not isinstance(value, str):
        raise InvalidRequest(
            "'sampling_parameters' must be a string holding a JSON object",
            param="sampling_parameters",
            code="invalid_value",
        )
    try:
        obj = jsonutil.loads(value)
    except jsonutil.JSONDecodeError:
        raise InvalidRequest(
            "'sampling_parameters' is not valid JSON", param="sampling_parameters", code="invalid_value"
        ) from None
    if not isinstance(obj, dict):
        raise InvalidRequest(
            "'sampling_parameters' must hold a JSON object", param="sampling_parameters", code="invalid_value"
        )
    return obj


def merged_parameters(data: dict[str, Any], sampling: SamplingMode = "merge") -> dict[str, Any]:
    """`parameters` plus the top-level extras, each value checked the way Triton checks it, then
    `sampling_parameters` applied as `sampling` says."""
    params = data.get("parameters", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidRequest("'parameters' must be a JSON object", param="parameters", code="invalid_value")
    merged = dict(params)
    for key, value in data.items():
        if key not in RESERVED:
            merged[key] = value
    for key, value in merged.items():
        if isinstance(value, bool | int | float | str):
            continue
        if key in LIST_INPUTS and isinstance(value, list) and all(isinstance(v, str) for v in value):
            continue
        raise InvalidRequest(
            f"parameter '{key}' has invalid type. It should be either 'int', 'bool', 'float' or 'string'.",
            param=key,
            code="invalid_value",
        )
    if sampling != "ignore" and "sampling_parameters" in merged:
        inner = sampling_parameters(merged.pop("sampling_parameters"))
        if sampling == "only":
            merged = {k: v for k, v in merged.items() if k in VLLM_TENSORS}
        merged.update(inner)
    return merged


def flag(raw: dict[str, Any] | None, name: str) -> bool:
    """A boolean input set to true, top level or in `parameters` (top level wins, as in merging)."""
    if not raw:
        return False
    if name in raw:
        return raw[name] is True
    params = raw.get("parameters")
    return isinstance(params, dict) and params.get(name) is True


class Options(BaseModel):
    """`options` of a triton backend."""

    model_config = ConfigDict(extra="forbid")

    # Which server is behind the generate endpoint: it decides parameter names and framing.
    flavor: Literal["trtllm", "vllm", "mindie"] = "trtllm"
    # TRT-LLM needs max_tokens and the other servers' defaults are tiny: always send one.
    default_max_tokens: int = Field(512, ge=1)
    # Address a fixed model version (/versions/{v}/) instead of the server's choice.
    model_version: str | None = Field(None, pattern=r"^[0-9]+$")
    # trtllm: ask for output_log_probs to count generated tokens (usage, and length vs eos).
    count_tokens: bool = True


# What the gateway's own generate route reads (GenerateParameters), as Triton tensors: name,
# KServe datatype, config data type, shape. Lists are stop and bad words; all else is one value.
# Parameters are named as TRT-LLM's ensemble names them.
_INPUTS: tuple[tuple[str, str, str, int], ...] = (
    ("text_input", "BYTES", "TYPE_STRING", 1),
    *tensor_inputs(GenerateParameters, named_for=TRTLLM),
    ("sampling_parameters", "BYTES", "TYPE_STRING", 1),
)
_OUTPUTS: tuple[tuple[str, str, str, int], ...] = (
    ("text_output", "BYTES", "TYPE_STRING", -1),
    ("finish_reason", "BYTES", "TYPE_STRING", -1),
    ("num_input_tokens", "UINT32", "TYPE_UINT32", 1),
    ("num_output_tokens", "UINT32", "TYPE_UINT32", 1),
)
GATEWAY_PLATFORM = "gateway"


def model_metadata(name: str) -> dict[str, Any]:
    """KServe v2 metadata of a model the gateway serves from a backend of another dialect: the
    inputs its generate route reads (every one but text_input optional) and the outputs it can
    give (all but text_output only when asked)."""

    def t(n: str, dt: str, dims: int) -> dict[str, Any]:
        return {"name": n, "datatype": dt, "shape": [dims]}

    return {
        "name": name,
        "versions": ["1"],
        "platform": GATEWAY_PLATFORM,
        "inputs": [t(n, dt, d) for n, dt, _, d in _INPUTS],
        "outputs": [t(n, dt, d) for n, dt, _, d in _OUTPUTS],
    }


def model_config(name: str) -> dict[str, Any]:
    """The model configuration matching `model_metadata`: one request at a time, decoupled (it
    streams on /generate_stream)."""

    def t(n: str, ct: str, dims: int, optional: bool) -> dict[str, Any]:
        return {"name": n, "data_type": ct, "dims": [dims], "optional": optional}

    return {
        "name": name,
        "platform": GATEWAY_PLATFORM,
        "max_batch_size": 0,
        "input": [t(n, ct, d, n != "text_input") for n, _, ct, d in _INPUTS],
        "output": [t(n, ct, d, False) for n, _, ct, d in _OUTPUTS],
        "model_transaction_policy": {"decoupled": True},
    }


def server_metadata(version: str) -> dict[str, Any]:
    """The gateway's own `GET /v2` answer, where no Triton server stands behind the route."""
    return {"name": "llm-gateway", "version": version, "extensions": ["model_configuration"]}
