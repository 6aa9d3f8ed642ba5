"""Triton generate wire models: the request's parameters, the backend options, model metadata.

Triton treats every key of a generate body other than `id`, `text_input` and `parameters` the
same as a key inside `parameters`, so both are merged before validation. Parameter values must
be scalars, as Triton demands of request parameters; only the list-valued tensors LLM backends
declare (stop and bad words) may be arrays. The vLLM backend's `sampling_parameters` is a string
holding a JSON object; its keys join the parameters (and may hold lists, such as `stop`).
"""

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from gateway import jsonutil
from gateway.neutral.errors import InvalidRequest

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
    `stop`) and MindIE's variant (`max_new_tokens`).
    """

    model_config = ConfigDict(extra="ignore", strict=True)

    max_tokens: int | None = Field(None, ge=1, validation_alias=_alias("max_tokens", "max_new_tokens"))
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, ge=0, le=1, validation_alias=_alias("top_p", "runtime_top_p"))
    top_k: int | None = Field(None, ge=-1, validation_alias=_alias("top_k", "runtime_top_k"))
    min_p: float | None = Field(None, ge=0, le=1)
    typical_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = Field(None, ge=0, validation_alias=_alias("random_seed", "seed"))
    stop: str | list[str] | None = Field(None, validation_alias=_alias("stop_words", "stop"))
    bad_words: str | list[str] | None = None
    repetition_penalty: float | None = Field(None, gt=0)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    beam_width: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1, validation_alias=_alias("num_return_sequences", "n"))
    do_sample: bool | None = None
    ignore_eos: bool | None = None
    min_tokens: int | None = Field(None, ge=0)
    skip_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    exclude_input_in_output: bool | None = None
    # Only reachable through `sampling_parameters` (a list is not a legal request parameter).
    stop_token_ids: list[int] | None = None
    # vLLM backend outputs a client may ask for.
    return_finish_reason: bool | None = None
    return_num_input_tokens: bool | None = None
    return_num_output_tokens: bool | None = None
    # TRT-LLM's log probabilities, and MindIE's details (both read only by a simulated server).
    return_log_probs: bool | None = None
    details: bool | None = None
    # Streaming is chosen by the URL; the flag is accepted and ignored.
    stream: bool | None = None


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
_INPUTS: tuple[tuple[str, str, str, int], ...] = (
    ("text_input", "BYTES", "TYPE_STRING", 1),
    ("max_tokens", "INT32", "TYPE_INT32", 1),
    ("stop_words", "BYTES", "TYPE_STRING", -1),
    ("bad_words", "BYTES", "TYPE_STRING", -1),
    ("temperature", "FP32", "TYPE_FP32", 1),
    ("top_p", "FP32", "TYPE_FP32", 1),
    ("top_k", "INT32", "TYPE_INT32", 1),
    ("min_p", "FP32", "TYPE_FP32", 1),
    ("typical_p", "FP32", "TYPE_FP32", 1),
    ("random_seed", "UINT64", "TYPE_UINT64", 1),
    ("repetition_penalty", "FP32", "TYPE_FP32", 1),
    ("presence_penalty", "FP32", "TYPE_FP32", 1),
    ("frequency_penalty", "FP32", "TYPE_FP32", 1),
    ("min_tokens", "INT32", "TYPE_INT32", 1),
    ("beam_width", "INT32", "TYPE_INT32", 1),
    ("sampling_parameters", "BYTES", "TYPE_STRING", 1),
    ("stream", "BOOL", "TYPE_BOOL", 1),
    ("exclude_input_in_output", "BOOL", "TYPE_BOOL", 1),
    ("return_finish_reason", "BOOL", "TYPE_BOOL", 1),
    ("return_num_input_tokens", "BOOL", "TYPE_BOOL", 1),
    ("return_num_output_tokens", "BOOL", "TYPE_BOOL", 1),
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
