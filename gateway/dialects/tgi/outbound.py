"""Talking to a Hugging Face TGI server: POST /generate or /generate_stream.

Stop strings: TGI stops on them but keeps the matched text in its output, which is not what
OpenAI-semantics clients expect. The stop fate is therefore EMULATE (the gateway's stop adapter
cuts the text and reports the finish); the list is still sent, so TGI also stops generating.
Whole answers are cut here as well, so they are right even without the adapter.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from gateway import jsonutil
from gateway.adapters import count_tokens
from gateway.adapters.prompt import prompt_text
from gateway.core.params import Fate
from gateway.core.routing import Backend
from gateway.core.types import EmbeddingResult, Request, Result, Task
from gateway.dialects.base import NoOptions, UpstreamCall
from gateway.dialects.tgi import reading, wire

_FATES: dict[str, Fate] = {
    "stop": Fate.EMULATE,
    "include_stop_str_in_output": Fate.EMULATE,
    "seed": Fate.MAP,
    "top_k": Fate.MAP,
    "typical_p": Fate.MAP,
    "repetition_penalty": Fate.MAP,
    "frequency_penalty": Fate.MAP,
    "do_sample": Fate.MAP,
    "watermark": Fate.MAP,
    "truncate": Fate.MAP,
    "chat_template_kwargs": Fate.MAP,
    # TGI returns one sequence per request (best_of keeps only the best): n choices are n requests.
    "n": Fate.EMULATE,
}
# TGI samples as soon as one of these is set, so they are only sent when they mean something.
_DIRECT = ("top_k", "repetition_penalty", "frequency_penalty", "seed", "watermark", "truncate")


def tgi_parameters(p: Mapping[str, Any], max_tokens: int | None) -> dict[str, Any]:
    """Neutral params to TGI/MindIE `parameters`, within the ranges those servers accept:
    temperature 0 means greedy (do_sample false, no temperature), top_p/typical_p of 1 or more
    are left out (the exclusive bound is rejected), and 0 or less are left out as well."""
    out: dict[str, Any] = {}
    if max_tokens is not None:
        out["max_new_tokens"] = max_tokens
    temp = p.get("temperature")
    greedy = p.get("do_sample") is False or temp == 0
    if greedy:
        out["do_sample"] = False
    else:
        if temp is not None:
            out["temperature"] = temp
        if p.get("do_sample") is True:
            out["do_sample"] = True
    for name in ("top_p", "typical_p"):
        v = p.get(name)
        if v is not None and 0 < v < 1 and not greedy:
            out[name] = v
    for name in _DIRECT:
        if name in p:
            out[name] = p[name]
    if p.get("stop"):
        out["stop"] = list(p["stop"])
    return out


@dataclass(slots=True)
class _State:
    req: Request
    prompt_tokens: int | None  # counted with the backend's tokenizer, when one is configured


def _header_int(headers: Mapping[str, str] | None, name: str) -> int | None:
    value = headers.get(name) if headers is not None else None
    return int(value) if value is not None and value.isdigit() else None


class TGIOutbound:
    name = "tgi"
    shared_credentials = False
    options_model: type[BaseModel] = NoOptions

    def fates(self, backend: Backend, req: Request) -> Mapping[str, Fate]:
        return _FATES

    def build(self, req: Request, backend: Backend) -> UpstreamCall:
        if req.task is Task.EMBEDDING:
            from gateway.core.errors import Unsupported

            raise Unsupported(f"backend {backend.name!r} (tgi) does not serve embeddings", code="unsupported_task")
        params = tgi_parameters(req.params, req.params.get("max_tokens"))
        params["details"] = True  # finish reason and token counts come only with details
        params["return_full_text"] = False  # the prompt is prepended by the gateway when asked
        if req.inbound == "tgi":
            rp = wire.raw_params(req)
            # Same dialect: TGI-only knobs the neutral form does not carry.
            for key in ("decoder_input_details", "adapter_id"):
                if rp.get(key) is not None:
                    params[key] = rp[key]
        prompt = prompt_text(req, backend)
        body = {"inputs": prompt, "parameters": params}
        state = _State(req, count_tokens(backend, prompt))
        path = "/generate_stream" if req.stream else "/generate"
        return UpstreamCall(path, jsonutil.dumps(body), req.stream, state=state)

    def parse_result(self, call: UpstreamCall, body: bytes) -> Result | EmbeddingResult:
        # TGI reports the prompt's token count only in a response header.
        prompt_tokens = _header_int(call.response_headers, "x-prompt-tokens") or call.state.prompt_tokens
        return reading.parse_object(jsonutil.loads(body), prompt_tokens)

    def stream_parser(self, call: UpstreamCall) -> reading.GenerateStreamParser:
        return reading.GenerateStreamParser(call.state.prompt_tokens)

    def error_message(self, status: int, body: bytes) -> str:
        return reading.error_message(status, body)

    def health_path(self, backend: Backend) -> str:
        return "/health"

    def models(self, body: bytes) -> list[str]:
        obj = jsonutil.loads(body)
        mid = obj.get("model_id") if isinstance(obj, dict) else None
        return [mid] if isinstance(mid, str) else []
