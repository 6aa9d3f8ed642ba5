"""The three servers behind Triton's generate extension, as a simulator imitates them.

The gateway's own Triton inbound is lenient: it takes every family's parameter names. A simulated
server (`ctx.server` / the app's SIMULATED_SERVER is the backend `Options` of the server it
imitates) reads a request the way that server does:

- trtllm: `max_tokens` is a required input; stop words stay in the output; the prompt is echoed in
  a whole answer unless `exclude_input_in_output`; `sampling_parameters` means nothing.
- vllm: `sampling_parameters`, when given, replaces the request parameters; max_tokens defaults
  to vLLM's 16; asking for the prompt back on a stream is an error.
- mindie: its own TGI-like names only (`max_new_tokens`; no stop words, no `max_tokens`).
"""

from typing import Any

from pydantic import BaseModel

from gateway.core.errors import InvalidRequest
from gateway.dialects.triton.flavors import MINDIE_ID
from gateway.dialects.triton.schema import GenerateParameters, Options, SamplingMode

SAMPLING: dict[str | None, SamplingMode] = {None: "merge", "trtllm": "ignore", "vllm": "only", "mindie": "ignore"}
VLLM_DEFAULT_MAX_TOKENS = 16
# Names of NVIDIA's ensembles and of the vLLM backend that MindIE's variant does not read.
_NOT_MINDIE = ("max_tokens", "stop_words", "stop", "bad_words", "exclude_input_in_output", "stop_token_ids")


def flavor_of(server: BaseModel | None) -> str | None:
    """The imitated server's flavour, or None when the gateway serves real clients."""
    return server.flavor if isinstance(server, Options) else None


def read_as(flavor: str | None, data: dict[str, Any], merged: dict[str, Any], stream: bool) -> dict[str, Any]:
    """The merged parameters as the imitated server sees them (unchanged for the gateway)."""
    if flavor == "trtllm":
        merged.pop("max_new_tokens", None)
        merged.pop("stop", None)
        if "max_tokens" not in merged:
            raise InvalidRequest("missing required input 'max_tokens'", param="max_tokens", code="invalid_value")
    elif flavor == "vllm":
        if stream and merged.get("exclude_input_in_output") is False:
            raise InvalidRequest(
                "streaming cannot return the prompt: exclude_input_in_output must not be false",
                param="exclude_input_in_output",
                code="invalid_value",
            )
        merged.setdefault("max_tokens", VLLM_DEFAULT_MAX_TOKENS)
    elif flavor == "mindie":
        rid = data.get("id")
        if isinstance(rid, str) and not MINDIE_ID.match(rid):
            raise InvalidRequest("id must match ^[a-zA-Z0-9_-]{1,256}$", param="id", code="invalid_value")
        for name in _NOT_MINDIE:
            merged.pop(name, None)
    return merged


def adjust(flavor: str | None, m: GenerateParameters, params: dict[str, Any]) -> None:
    """Neutral params the fake model needs to answer as the imitated server would."""
    if flavor == "trtllm":
        params["include_stop_str_in_output"] = True  # TRT-LLM stops after the stop word
        if m.return_log_probs:
            params["logprobs"] = True  # the fake model's log probabilities fill output_log_probs
