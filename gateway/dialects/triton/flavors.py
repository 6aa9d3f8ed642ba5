"""Upstream generate bodies for the three servers that speak Triton's generate extension.

- trtllm: the TensorRT-LLM ensemble; every knob is an input tensor sent top level.
- vllm: Triton's vLLM backend; sampling knobs go in `sampling_parameters`, a JSON *string*,
  because request parameters cannot hold the stop list.
- mindie: MindIE's own variant, with TGI-like names under `parameters` and range rules of its
  own (temperature > 0, top_p < 1).
"""

import re
from collections.abc import Callable
from typing import Any

from gateway import jsonutil
from gateway.core.errors import InvalidRequest
from gateway.core.types import Request

MINDIE_ID = re.compile(r"^[a-zA-Z0-9_-]{1,256}$")
_SEED_MAX = 2**63 - 1


def _seed(p: dict[str, Any]) -> int | None:
    seed = p.get("seed")
    if seed is None:
        return None
    if not 0 <= seed <= _SEED_MAX:
        raise InvalidRequest(
            f"seed must be within [0, {_SEED_MAX}] for this backend", param="seed", code="invalid_value"
        )
    return int(seed)


def trtllm_body(req: Request, prompt: str, max_tokens: int, count_tokens: bool) -> dict[str, Any]:
    p = req.params
    body: dict[str, Any] = {}
    if req.request_id:
        body["id"] = req.request_id
    body["text_input"] = prompt
    body["max_tokens"] = max_tokens
    # Older ensembles require both word lists; "" is how their own examples say "none".
    body["bad_words"] = p.get("bad_words") or ""
    body["stop_words"] = p.get("stop") or ""
    body["exclude_input_in_output"] = True
    for name in ("temperature", "top_p", "top_k", "repetition_penalty", "presence_penalty", "frequency_penalty"):
        if name in p:
            body[name] = p[name]
    greedy = p.get("do_sample") is False or p.get("temperature") == 0
    if greedy and "top_k" not in p:
        body["top_k"] = 1  # greedy whatever the executor's default sampling is
    seed = _seed(p)
    if seed is not None:
        body["random_seed"] = seed
    if "beam_width" in p:
        body["beam_width"] = p["beam_width"]
    if count_tokens:
        body["return_log_probs"] = True
    if req.stream:
        body["stream"] = True
    return body


_VLLM_SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "stop",
    "stop_token_ids",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "ignore_eos",
)


def vllm_body(req: Request, prompt: str, max_tokens: int, count_tokens: bool) -> dict[str, Any]:
    p = req.params
    sampling: dict[str, Any] = {"max_tokens": max_tokens}
    for name in _VLLM_SAMPLING:
        if name in p:
            sampling[name] = p[name]
    if p.get("do_sample") is False and "temperature" not in p:
        sampling["temperature"] = 0.0
    seed = _seed(p)
    if seed is not None:
        sampling["seed"] = seed
    body: dict[str, Any] = {}
    if req.request_id:
        body["id"] = req.request_id
    body["text_input"] = prompt
    if req.stream:
        body["stream"] = True
    body["sampling_parameters"] = jsonutil.dumps_str(sampling)
    body["exclude_input_in_output"] = True
    body["return_finish_reason"] = True
    body["return_num_input_tokens"] = True
    body["return_num_output_tokens"] = True
    return body


def mindie_body(req: Request, prompt: str, max_tokens: int, count_tokens: bool) -> dict[str, Any]:
    p = req.params
    params: dict[str, Any] = {"details": True, "max_new_tokens": max_tokens}
    sampling = False
    greedy = p.get("do_sample") is False
    temp = p.get("temperature")
    if temp is not None:
        if temp == 0:
            greedy = True  # MindIE rejects 0; greedy is how it says the same thing
        else:
            params["temperature"] = temp
            sampling = True
    top_p = p.get("top_p")
    if top_p is not None:
        if top_p <= 0:
            greedy = True
        elif top_p < 1:
            params["top_p"] = top_p  # 1.0 (no nucleus cut) is outside MindIE's range: leave it out
            sampling = True
    top_k = p.get("top_k")
    if top_k is not None and top_k > 0:
        params["top_k"] = top_k
        sampling = True
    if greedy:
        params["do_sample"] = False
    elif p.get("do_sample") is True or sampling:
        params["do_sample"] = True
    seed = _seed(p)
    if seed is not None:
        params["seed"] = seed
    for name in ("repetition_penalty", "typical_p", "watermark", "priority", "timeout"):
        if name in p:
            params[name] = p[name]
    body: dict[str, Any] = {}
    if MINDIE_ID.match(req.request_id):
        body["id"] = req.request_id
    body["text_input"] = prompt
    body["parameters"] = params
    return body


BUILDERS: dict[str, Callable[[Request, str, int, bool], dict[str, Any]]] = {
    "trtllm": trtllm_body,
    "vllm": vllm_body,
    "mindie": mindie_body,
}
