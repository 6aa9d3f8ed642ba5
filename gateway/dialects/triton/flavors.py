"""The three servers behind Triton's generate extension, one object each: TensorRT-LLM's
ensemble, Triton's vLLM backend and MindIE's variant. `options.flavor` names one; the object
carries everything in which they differ: the parameters each carries (fates) and the body it
takes, how its answers are read, its health probe, its metrics page, and how a simulated server
of it reads and answers (gateway.dialects.triton.simulated). See docs/dialects/triton.md.
"""

from collections.abc import Callable, Mapping
from typing import Any

from gateway import jsonutil
from gateway.codec.structured import guide_of, outputs_of
from gateway.dialects.triton import params as names
from gateway.dialects.triton import simulated
from gateway.dialects.triton.families import MINDIE_READING, TRTLLM_READING, VLLM_READING
from gateway.dialects.triton.reading import Reading
from gateway.modelserver import MINDIE_PAGE, TRTLLM_PAGE, VLLM_PAGE, PageKind
from gateway.neutral.errors import InvalidRequest
from gateway.neutral.params import Fate, Params
from gateway.records import record

MINDIE_ID = simulated.MINDIE_ID
_SEED_MAX = 2**63 - 1
# Every family: the chat template takes its kwargs on the way to the prompt; one sequence per
# generate call, so n choices are n calls (fan-out).
_ALL = {"do_sample": Fate.MAP, "chat_template_kwargs": Fate.MAP, "n": Fate.EMULATE}
# The vLLM backend's key for structured output in its sampling parameters.
VLLM_STRUCTURED = "structured_outputs"


def _seed(p: Params) -> Params:
    if p.seed is not None and not 0 <= p.seed <= _SEED_MAX:
        raise InvalidRequest(
            f"seed must be within [0, {_SEED_MAX}] for this backend", param="seed", code="invalid_value"
        )
    return p


def trtllm_body(p: Params, request_id: str, prompt: str, stream: bool, count_tokens: bool) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if request_id:
        body["id"] = request_id
    body["text_input"] = prompt
    body.update(names.TRTLLM.write(_seed(p)))
    # Older ensembles require both word lists; "" is how their own examples say "none".
    body.setdefault("bad_words", "")
    body.setdefault("stop_words", "")
    body["exclude_input_in_output"] = True
    if p.greedy and p.top_k is None:
        body["top_k"] = 1  # greedy whatever the executor's default sampling is
    if count_tokens:
        body["return_log_probs"] = True
    if p.response_format is not None:
        body.update(guide_of(p.response_format))
    if stream:
        body["stream"] = True
    return body


def vllm_body(p: Params, request_id: str, prompt: str, stream: bool, count_tokens: bool) -> dict[str, Any]:
    sampling = names.VLLM_SAMPLING.write(_seed(p))
    if p.do_sample is False and p.temperature is None:
        sampling["temperature"] = 0.0
    outputs = outputs_of(p.response_format) if p.response_format is not None else None
    if outputs is not None:
        # The backend reads this one key as a string holding the object (vLLM's own name for it,
        # since Triton 25.11; `guided_decoding` before).
        sampling[VLLM_STRUCTURED] = jsonutil.dumps_str(outputs)
    body: dict[str, Any] = {}
    if request_id:
        body["id"] = request_id
    body["text_input"] = prompt
    if stream:
        body["stream"] = True
    body["sampling_parameters"] = jsonutil.dumps_str(sampling)
    body["exclude_input_in_output"] = True
    body["return_finish_reason"] = True
    body["return_num_input_tokens"] = True
    body["return_num_output_tokens"] = True
    return body


def mindie_body(p: Params, request_id: str, prompt: str, stream: bool, count_tokens: bool) -> dict[str, Any]:
    """MindIE's `parameters` (schema.MindIEParameters: sampling values outside its ranges are left
    out). Greedy, which MindIE hears only as do_sample false, is also a temperature of 0 or a
    top_p of 0 or less; any sampling value sent, or do_sample true, asks for sampling."""
    params = names.MINDIE.write(_seed(p))
    params["details"] = True
    if p.do_sample is False or p.temperature == 0 or (p.top_p is not None and p.top_p <= 0):
        params["do_sample"] = False
    elif p.do_sample is True or "temperature" in params or "top_p" in params or "top_k" in params:
        params["do_sample"] = True  # asked for, or a sampling value sent
    body: dict[str, Any] = {}
    if MINDIE_ID.match(request_id):
        body["id"] = request_id
    body["text_input"] = prompt
    body["parameters"] = params
    return body


# (params, request id, prompt, stream, count tokens) -> the generate body
BodyBuilder = Callable[[Params, str, str, bool, bool], dict[str, Any]]


@record
class Flavor:
    name: str  # as `options.flavor` names it
    fates: Mapping[str, Fate]
    body: BodyBuilder
    reading: Reading
    # It says a sequence is finished in the event with its last text (the vLLM backend asked for
    # its finish reason, MindIE asked for details); TRT-LLM's stream just ends.
    finish_in_band: bool
    page: PageKind  # what its metrics page says of its KV cache
    # It keeps a matched stop word in its output (the gateway cuts it unless asked to keep it).
    keeps_stop_words: bool
    # It counts the prompt's tokens itself when asked (num_input_tokens).
    counts_prompt: bool
    # Its whole answers end with details MindIE-style when the client asked for them.
    final_details: bool
    # Readiness says 503 while the server is merely busy: liveness is the honest probe.
    probe_liveness: bool
    imitation: simulated.Imitation


TRTLLM = Flavor(
    "trtllm",
    # Structured output as guided decoding inputs.
    names.TRTLLM.fates(include_stop_str_in_output=Fate.MAP, response_format=Fate.MAP, **_ALL),
    trtllm_body,
    TRTLLM_READING,
    finish_in_band=False,
    page=TRTLLM_PAGE,
    keeps_stop_words=True,
    counts_prompt=False,
    final_details=False,
    probe_liveness=False,
    imitation=simulated.TRTLLM,
)
VLLM = Flavor(
    "vllm",
    names.VLLM_SAMPLING.fates(response_format=Fate.MAP, **_ALL),
    vllm_body,
    VLLM_READING,
    finish_in_band=True,
    page=VLLM_PAGE,
    keeps_stop_words=False,
    counts_prompt=True,
    final_details=False,
    probe_liveness=False,
    imitation=simulated.VLLM,
)
# MindIE's Triton route has no stop parameter: the gateway cuts the text itself.
MINDIE = Flavor(
    "mindie",
    names.MINDIE.fates(
        temperature=Fate.MAP,
        top_p=Fate.MAP,
        top_k=Fate.MAP,
        stop=Fate.EMULATE,
        include_stop_str_in_output=Fate.EMULATE,
        **_ALL,
    ),
    mindie_body,
    MINDIE_READING,
    finish_in_band=True,
    page=MINDIE_PAGE,
    keeps_stop_words=False,
    counts_prompt=False,
    final_details=True,
    probe_liveness=True,
    imitation=simulated.MINDIE,
)
FLAVORS: dict[str, Flavor] = {f.name: f for f in (TRTLLM, VLLM, MINDIE)}
