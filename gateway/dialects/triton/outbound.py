"""Talking to a server with Triton's generate extension: TRT-LLM, vLLM backend or MindIE.

`options.flavor` says which one (see flavors.py). Generate is text in, text out: chat requests
are turned into a prompt with the model's chat template, so they need the backend's
`tokenizer:` folder. A Triton client on a Triton backend has its body forwarded as it is (it
already speaks that server's parameter names); only the model in the path changes.
"""

import re
from collections.abc import Mapping
from urllib.parse import quote

from pydantic import BaseModel

from gateway import jsonutil
from gateway.adapters import Tokenizer, tokenizer_for
from gateway.adapters.prompt import prompt_text
from gateway.core.errors import GatewayError, InvalidRequest, Unsupported
from gateway.core.params import Fate
from gateway.core.routing import Backend
from gateway.core.types import EmbeddingResult, Request, Result, Task
from gateway.dialects.base import UpstreamCall
from gateway.dialects.triton.flavors import BUILDERS
from gateway.dialects.triton.reading import CallState, TritonStreamParser, error_text, parse_body
from gateway.dialects.triton.schema import Options

_COMMON: dict[str, Fate] = {
    "stop": Fate.MAP,
    "seed": Fate.MAP,
    "top_k": Fate.MAP,
    "repetition_penalty": Fate.MAP,
    "do_sample": Fate.MAP,
    # Consumed by the chat template on the way to the prompt.
    "chat_template_kwargs": Fate.MAP,
    # One sequence per generate call: n choices are n calls (core.fanout).
    "n": Fate.EMULATE,
}
FATES: dict[str, dict[str, Fate]] = {
    "trtllm": {
        **_COMMON,
        "presence_penalty": Fate.MAP,
        "frequency_penalty": Fate.MAP,
        "bad_words": Fate.MAP,
        "beam_width": Fate.MAP,
        # TRT-LLM keeps the stop word; the gateway removes it unless this asks to keep it.
        "include_stop_str_in_output": Fate.MAP,
    },
    "vllm": {
        **_COMMON,
        "min_p": Fate.MAP,
        "presence_penalty": Fate.MAP,
        "frequency_penalty": Fate.MAP,
        "stop_token_ids": Fate.MAP,
        "include_stop_str_in_output": Fate.MAP,
        "skip_special_tokens": Fate.MAP,
        "ignore_eos": Fate.MAP,
    },
    "mindie": {
        **_COMMON,
        # MindIE's Triton route has no stop parameter: the gateway cuts the text itself.
        "stop": Fate.EMULATE,
        "include_stop_str_in_output": Fate.EMULATE,
        "typical_p": Fate.MAP,
        "watermark": Fate.MAP,
        "priority": Fate.MAP,
        "timeout": Fate.MAP,
    },
}


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


def _tokenizer(backend: Backend) -> Tokenizer | None:
    if not backend.conf.tokenizer:
        return None
    try:
        return tokenizer_for(backend)
    except GatewayError:
        return None


def _count_prompt(st: CallState, tok: Tokenizer | None, asked: bool) -> None:
    """Count the prompt now, while the request is built (off the event loop when it is large),
    unless the server was asked to report the count itself (the vLLM backend's num_input_tokens)."""
    st.tokenizer = tok
    if tok is not None and not asked:
        st.prompt_tokens = tok.count(st.prompt)


def _options(backend: Backend) -> Options:
    opts = backend.options
    return opts if isinstance(opts, Options) else Options()


class TritonOutbound:
    name = "triton"
    shared_credentials = False
    options_model: type[BaseModel] = Options

    def fates(self, backend: Backend, req: Request) -> Mapping[str, Fate]:
        return FATES[_options(backend).flavor]

    def _path(self, backend: Backend, model: str, stream: bool) -> str:
        opts = _options(backend)
        base = "/v2/models/" + quote(model, safe="")
        if opts.model_version:
            base += "/versions/" + opts.model_version
        return base + ("/generate_stream" if stream else "/generate")

    def build(self, req: Request, backend: Backend) -> UpstreamCall:
        opts = _options(backend)
        if req.task is Task.EMBEDDING:
            raise Unsupported(
                f"backend {backend.name!r} (triton generate) cannot compute embeddings", code="unsupported_task"
            )
        model = backend.model or client_model_name(req.model)
        path = self._path(backend, model, req.stream)
        if req.inbound == "triton" and req.raw is not None:
            raw = req.raw
            details = raw.get("details", (raw.get("parameters") or {}).get("details"))
            st = CallState(opts.flavor, raw.get("text_input") or "", req.params.get("max_tokens"))
            st.expect_final = opts.flavor == "mindie" and details is True
            _count_prompt(st, _tokenizer(backend), asked=bool(raw.get("return_num_input_tokens")))
            return UpstreamCall(path, jsonutil.dumps(raw), req.stream, state=st)
        prompt = prompt_text(req, backend)
        max_tokens = int(req.params.get("max_tokens") or opts.default_max_tokens)
        body = BUILDERS[opts.flavor](req, prompt, max_tokens, opts.count_tokens)
        stops = req.params.get("stop") or None
        st = CallState(opts.flavor, prompt, max_tokens)
        st.stops_requested = bool(stops)
        st.expect_final = opts.flavor == "mindie"
        if opts.flavor == "trtllm" and stops and not req.params.get("include_stop_str_in_output"):
            st.strip_stops = list(stops)
        _count_prompt(st, _tokenizer(backend), asked=opts.flavor == "vllm")
        return UpstreamCall(path, jsonutil.dumps(body), req.stream, state=st)

    def parse_result(self, call: UpstreamCall, body: bytes) -> Result | EmbeddingResult:
        return parse_body(call.state, body)

    def stream_parser(self, call: UpstreamCall) -> TritonStreamParser:
        return TritonStreamParser(call.state)

    def error_message(self, status: int, body: bytes) -> str:
        try:
            return error_text(jsonutil.loads(body))
        except jsonutil.JSONDecodeError:
            return body.decode("utf-8", "replace").strip()[:500] or "(empty body)"

    def health_path(self, backend: Backend) -> str:
        opts = _options(backend)
        if opts.flavor == "mindie" or not backend.model:
            # MindIE answers 503 on readiness while merely busy; liveness is the honest probe.
            return "/v2/health/live" if opts.flavor == "mindie" else "/v2/health/ready"
        return "/v2/models/" + quote(backend.model, safe="") + "/ready"

    def models(self, body: bytes) -> list[str]:
        obj = jsonutil.loads(body)
        name = obj.get("name") if isinstance(obj, dict) else None
        return [name] if isinstance(name, str) else []
