"""Talking to a Hugging Face TGI server: POST /generate or /generate_stream.

Stop strings: TGI stops on them but keeps the matched text in its output, which is not what
OpenAI-semantics clients expect. The stop fate is therefore EMULATE (the gateway's stop adapter
cuts the text and reports the finish); the list is still sent, so TGI also stops generating.
"""

from collections.abc import Mapping
from typing import Any

from gateway import jsonutil
from gateway.adapters import count_tokens
from gateway.adapters.prompt import prompt_text
from gateway.codec.contract import TEXT_PARTS, BackendView, Carriage, NoOptions, Outgoing, UpstreamCall
from gateway.codec.structured import schema_of
from gateway.codec.wirenames import WireNames
from gateway.dialects.tgi import reading
from gateway.dialects.tgi.params import PARAMETERS_OUT
from gateway.dialects.tgi.render import raw_params
from gateway.neutral.errors import Unsupported
from gateway.neutral.params import Fate, Params
from gateway.neutral.types import Answer, Request, Task
from gateway.records import record

FATES = PARAMETERS_OUT.fates(
    temperature=Fate.MAP,
    top_p=Fate.MAP,
    typical_p=Fate.MAP,
    do_sample=Fate.MAP,
    # Consumed by the chat template on the way to the prompt.
    chat_template_kwargs=Fate.MAP,
    stop=Fate.EMULATE,
    include_stop_str_in_output=Fate.EMULATE,
    # TGI returns one sequence per request (best_of keeps only the best): n choices are n requests.
    n=Fate.EMULATE,
    # As a JSON grammar.
    response_format=Fate.MAP,
)


def sampling(p: Params, max_tokens: int | None, wire: WireNames = PARAMETERS_OUT) -> dict[str, Any]:
    """Neutral params to TGI/MindIE `parameters`, within the ranges the server's schema gives
    (what is outside is left out: TGI refuses a top_p of 1, the OpenAI default, and a top_k of 0 or
    -1, vLLM's "off"). Greedy is do_sample false with no temperature (TGI refuses 0) and no top_p
    or typical_p below 1, either of which would turn sampling on."""
    out = wire.write(p.replace(max_tokens=max_tokens))
    if p.greedy:
        out["do_sample"] = False
        out.pop("temperature", None)
        for name in ("top_p", "typical_p"):
            if out.get(name, 1) < 1:
                del out[name]
    return out


@record
class _State:
    req: Request
    prompt_tokens: int | None  # counted with the backend's tokenizer, when one is configured


def _header_int(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    return int(value) if value is not None and value.isdigit() else None


WIRE = "tgi"
# The final event carries the last token; chat is a prompt made by the chat template.
_CARRIAGE = Carriage(FATES, finish_in_band=True, wire=WIRE, parts=TEXT_PARTS, templated=True)


def grammar(response_format: Mapping[str, Any]) -> dict[str, Any] | None:
    """A response format as TGI's JSON grammar; None for plain text."""
    schema = schema_of(response_format)
    return None if schema is None else {"type": "json", "value": schema}


class TGIOutbound:
    options_model = NoOptions
    shared_credentials = False
    batch_prompts = False
    forwards_same_wire = False

    def carriage(self, req: Request, backend: BackendView[NoOptions]) -> Carriage:
        return _CARRIAGE

    def build(self, out: Outgoing[NoOptions]) -> UpstreamCall:
        req, backend = out.req, out.backend
        if req.task is Task.EMBEDDING:
            raise Unsupported(f"backend {backend.name!r} (tgi) does not serve embeddings", code="unsupported_task")
        params = sampling(req.params, req.params.max_tokens)
        params["details"] = True  # finish reason and token counts come only with details
        params["return_full_text"] = False  # the prompt is prepended by the gateway when asked
        if req.params.response_format is not None:
            held = grammar(req.params.response_format)
            if held is not None:
                params["grammar"] = held
        if out.same_wire:
            rp = raw_params(req)
            # TGI-only knobs the neutral form does not carry.
            for key in ("decoder_input_details", "adapter_id"):
                if rp.get(key) is not None:
                    params[key] = rp[key]
        prompt = prompt_text(req, backend)
        body = {"inputs": prompt, "parameters": params}
        state = _State(req, count_tokens(backend, prompt))
        path = "/generate_stream" if req.stream else "/generate"
        return UpstreamCall(path, jsonutil.dumps(body), req.stream, state=state)

    def parse_result(self, call: UpstreamCall, body: bytes, headers: Mapping[str, str]) -> Answer:
        # TGI reports the prompt's token count only in a response header.
        prompt_tokens = _header_int(headers, "x-prompt-tokens") or call.state.prompt_tokens
        return reading.parse_object(jsonutil.loads(body), prompt_tokens)

    def stream_parser(self, call: UpstreamCall) -> reading.GenerateStreamParser:
        return reading.GenerateStreamParser(call.state.prompt_tokens)

    def error_message(self, status: int, body: bytes) -> str:
        return reading.error_message(status, body)

    def health_path(self, backend: BackendView[NoOptions]) -> str:
        return "/health"
