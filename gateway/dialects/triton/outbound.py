"""Talking to a server with Triton's generate extension: TRT-LLM, vLLM backend or MindIE.

`options.flavor` says which one. Generate is text in, text out: chat requests are turned into a
prompt with the model's chat template, so they need the backend's `tokenizer:` folder. A Triton
client on a Triton backend has its body forwarded as it is (it already speaks that server's
parameter names); only the model in the path changes. See docs/dialects/triton.md.
"""

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from gateway import jsonutil
from gateway.adapters import Tokenizer, optional_tokenizer
from gateway.adapters.prompt import prompt_text
from gateway.codec.contract import BackendView, Carriage, Outgoing, UpstreamCall
from gateway.dialects.triton import params as names
from gateway.dialects.triton.reading import CallState, TritonStreamParser, error_body_text, parse_body
from gateway.dialects.triton.schema import Options
from gateway.neutral.errors import InvalidRequest, Unsupported
from gateway.neutral.params import Fate, Params
from gateway.neutral.types import Answer, Request, Task

# Every family: the chat template takes its kwargs on the way to the prompt; one sequence per
# generate call, so n choices are n calls (fan-out).
_ALL = {"do_sample": Fate.MAP, "chat_template_kwargs": Fate.MAP, "n": Fate.EMULATE}
FATES: dict[str, dict[str, Fate]] = {
    # TRT-LLM keeps the stop word; the gateway removes it unless the client asks to keep it.
    "trtllm": names.TRTLLM.fates(include_stop_str_in_output=Fate.MAP, **_ALL),
    "vllm": names.VLLM_SAMPLING.fates(**_ALL),
    # MindIE's Triton route has no stop parameter: the gateway cuts the text itself.
    "mindie": names.MINDIE.fates(
        temperature=Fate.MAP,
        top_p=Fate.MAP,
        top_k=Fate.MAP,
        stop=Fate.EMULATE,
        include_stop_str_in_output=Fate.EMULATE,
        **_ALL,
    ),
}
MINDIE_ID = re.compile(r"^[a-zA-Z0-9_-]{1,256}$")
_SEED_MAX = 2**63 - 1
# A Triton model is named by its folder in the model repository; MindIE's variant checks the name
# against [\w\-.]+. A client-chosen name becomes a path segment, so it is held to that rule (and
# "." or ".." are refused, or the URL would resolve them).
_MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")


def client_model_name(name: str | None) -> str:
    if name is None or not _MODEL_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidRequest(
            f"{name!r} is not a valid Triton model name (letters, digits, '_', '-' and '.')",
            param="model",
            code="invalid_value",
        )
    return name


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
    if stream:
        body["stream"] = True
    return body


def vllm_body(p: Params, request_id: str, prompt: str, stream: bool, count_tokens: bool) -> dict[str, Any]:
    sampling = names.VLLM_SAMPLING.write(_seed(p))
    if p.do_sample is False and p.temperature is None:
        sampling["temperature"] = 0.0
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


BUILDERS: dict[str, Callable[[Params, str, str, bool, bool], dict[str, Any]]] = {
    "trtllm": trtllm_body,
    "vllm": vllm_body,
    "mindie": mindie_body,
}


def _options(backend: BackendView) -> Options:
    opts = backend.options
    return opts if isinstance(opts, Options) else Options()


@functools.lru_cache(maxsize=256)
def generate_path(model: str, version: str | None, stream: bool) -> str:
    """The generate path of a model (and version); remembered, as routes ask for few."""
    base = "/v2/models/" + quote(model, safe="")
    if version:
        base += "/versions/" + quote(version, safe="")
    return base + ("/generate_stream" if stream else "/generate")


def _prompt_count(st: CallState, tok: Tokenizer | None, asked: bool) -> Callable[[], None] | None:
    """What counts the prompt while the backend answers, unless the server was asked to report
    the count itself (the vLLM backend's num_input_tokens) or there is no tokenizer."""
    st.tokenizer = tok
    return st.count_prompt if tok is not None and not asked else None


class TritonOutbound:
    name = "triton"
    options_model: type[BaseModel] = Options
    shared_credentials = False
    batch_prompts = False
    forwards_same_wire = True

    def carriage(self, req: Request, backend: BackendView) -> Carriage:
        flavor = _options(backend).flavor
        # The vLLM backend (asked for its finish reason) and MindIE (asked for details) say a
        # sequence is finished in the event with its last text; TRT-LLM's stream just ends.
        return Carriage(FATES[flavor], finish_in_band=flavor != "trtllm")

    def build(self, out: Outgoing) -> UpstreamCall:
        req, backend = out.req, out.backend
        opts = _options(backend)
        if req.task is Task.EMBEDDING:
            raise Unsupported(
                f"backend {backend.name!r} (triton generate) cannot compute embeddings", code="unsupported_task"
            )
        model = backend.model or client_model_name(req.model)
        # The version the client named, else the configured one, if any.
        path = generate_path(model, req.path_params.get("version") or opts.model_version, req.stream)
        if out.same_wire and req.raw is not None:
            # The client speaks this server's wire: its body goes as it is, and the answer comes
            # back as it is, but for the model's name when the route exposes another.
            raw = req.raw
            details = raw.get("details", (raw.get("parameters") or {}).get("details"))
            st = CallState(opts.flavor, raw.get("text_input") or "", req.params.max_tokens)
            st.expect_final = opts.flavor == "mindie" and details is True
            st.passthrough = True
            if req.model is not None and req.model != model:
                st.rename = jsonutil.dumps(req.model)
            count = _prompt_count(st, optional_tokenizer(backend), asked=bool(raw.get("return_num_input_tokens")))
            return UpstreamCall(path, jsonutil.dumps(raw), req.stream, passthrough=True, state=st, meanwhile=count)
        prompt = prompt_text(req, backend)
        p = req.params
        max_tokens = p.max_tokens or opts.default_max_tokens
        sent = p if max_tokens == p.max_tokens else p.replace(max_tokens=max_tokens)
        body = BUILDERS[opts.flavor](sent, out.request_id, prompt, req.stream, opts.count_tokens)
        st = CallState(opts.flavor, prompt, max_tokens)
        st.stops_requested = bool(p.stop)
        st.expect_final = opts.flavor == "mindie"
        if opts.flavor == "trtllm" and p.stop and not p.include_stop_str_in_output:
            st.strip_stops = list(p.stop)
        count = _prompt_count(st, optional_tokenizer(backend), asked=opts.flavor == "vllm")
        return UpstreamCall(path, jsonutil.dumps(body), req.stream, state=st, meanwhile=count)

    def parse_result(self, call: UpstreamCall, body: bytes, headers: Mapping[str, str]) -> Answer:
        return parse_body(call.state, body)

    def stream_parser(self, call: UpstreamCall) -> TritonStreamParser:
        return TritonStreamParser(call.state)

    def error_message(self, status: int, body: bytes) -> str:
        return error_body_text(body)

    def health_path(self, backend: BackendView) -> str:
        opts = _options(backend)
        if opts.flavor == "mindie" or not backend.model:
            # MindIE answers 503 on readiness while merely busy; liveness is the honest probe.
            return "/v2/health/live" if opts.flavor == "mindie" else "/v2/health/ready"
        return "/v2/models/" + quote(backend.model, safe="") + "/ready"

    def models(self, body: bytes) -> list[str]:
        obj = jsonutil.loads(body)
        name = obj.get("name") if isinstance(obj, dict) else None
        return [name] if isinstance(name, str) else []
