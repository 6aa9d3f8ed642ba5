"""Talking to an OpenAI-compatible server: the request body for each task.

`options.extensions: vllm` marks a vLLM-style server (vLLM, SGLang, MindIE's OpenAI routes,
LiteLLM), which takes the sampling extensions the public API lacks. A client speaking OpenAI has
its body forwarded as it is, with only the model rewritten (and stream usage asked for, which the
gateway needs for its metrics and withholds from clients that did not ask).
"""

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gateway import jsonutil
from gateway.codec.capabilities import KvSource
from gateway.codec.contract import BackendView, Carriage, Outgoing, StreamParser, UpstreamCall
from gateway.codec.wirenames import WireNames
from gateway.dialects.openai import params as names
from gateway.dialects.openai import reading
from gateway.dialects.responses import outbound as responses
from gateway.dialects.responses import reading as responses_reading
from gateway.modelserver import VLLM_PAGE
from gateway.neutral.params import Fate, Params
from gateway.neutral.types import Answer, Message, Request, Task


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    extensions: Literal["none", "vllm"] = "none"
    # The server serves the Responses API itself (the public API and vLLM do): a client of that
    # API has its body forwarded as it is. Off, its requests are translated to chat completions.
    responses_api: bool = True


PATHS = {Task.CHAT: "/v1/chat/completions", Task.COMPLETION: "/v1/completions", Task.EMBEDDING: "/v1/embeddings"}
# The wire API of each task's path (Request.wire): a client that spoke it is the server's own.
WIRES = {Task.CHAT: "openai.chat", Task.COMPLETION: "openai.completions", Task.EMBEDDING: "openai.embeddings"}
# Besides what the names carry: greedy decoding is said with temperature 0, and logprobs have
# their own shape per task.
_SPECIAL = {"do_sample": Fate.MAP, "logprobs": Fate.MAP, "top_logprobs": Fate.MAP}


def out_names(task: Task, vllm: bool) -> WireNames:
    if task is Task.CHAT:
        return names.VLLM_CHAT_OUT if vllm else names.PUBLIC_CHAT_OUT
    if task is Task.COMPLETION:
        return names.VLLM_COMPLETION_OUT if vllm else names.PUBLIC_COMPLETION_OUT
    return names.EMBEDDING_OUT


def _vllm(backend: BackendView[Options]) -> bool:
    return backend.options.extensions == "vllm"


def message_dict(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.name is not None:
        out["name"] = m.name
    if m.tool_calls:
        out["tool_calls"] = m.tool_calls
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def sampling_fields(task: Task, p: Params, wire: WireNames) -> dict[str, Any]:
    """The parameter fields of an OpenAI-shaped body (also used by OpenAI-flavoured outbounds)."""
    body = wire.write(p)
    if p.do_sample is False and p.temperature is None:
        body["temperature"] = 0.0  # greedy, the way OpenAI-style servers say it
    if p.logprobs:
        if task is Task.CHAT:
            body["logprobs"] = True
            if p.top_logprobs is not None:
                body["top_logprobs"] = p.top_logprobs
        else:
            body["logprobs"] = p.top_logprobs or 0
    return body


def request_body(req: Request, model: str | None, vllm: bool) -> dict[str, Any]:
    """The OpenAI request body for a neutral request. With no model known (a TGI or MindIE
    client, a backend with no `model:`), the field is left out, not sent as null: vLLM then
    serves its one model, and a server that needs the field says so."""
    body: dict[str, Any] = {} if model is None else {"model": model}
    if req.task is Task.CHAT:
        body["messages"] = [message_dict(m) for m in req.messages or ()]
    elif req.task is Task.COMPLETION:
        body["prompt"] = req.prompt_ids if req.prompt_ids is not None else req.prompt
    else:
        body["input"] = req.input
        if req.params.encoding_format is not None:
            body["encoding_format"] = req.params.encoding_format
    body.update(sampling_fields(req.task, req.params, out_names(req.task, vllm)))
    if vllm and req.wants_token_ids:
        body["return_token_ids"] = True  # the ids the model generated, not the text re-tokenised
    if vllm and req.wants_token_details and not req.params.logprobs:
        # Each token's text and logprob, for a client whose answer details every token.
        body["logprobs"] = True if req.task is Task.CHAT else 0
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


# The names a client of each wire API sends (what a forwarded body is trimmed by).
_CLIENT_NAMES = {
    WIRES[Task.CHAT]: names.CHAT_IN,
    WIRES[Task.COMPLETION]: names.COMPLETION_IN,
    WIRES[Task.EMBEDDING]: names.EMBEDDING_IN,
}
# vLLM-style servers send a choice's finish in the chunk with its last token; the public API
# sends it in a chunk of its own.
_CARRIAGE = {
    (task, vllm): Carriage(
        out_names(task, vllm).fates(**_SPECIAL, **({"encoding_format": Fate.MAP} if task is Task.EMBEDDING else {})),
        finish_in_band=vllm,
        wire=WIRES[task],
    )
    for task in Task
    for vllm in (False, True)
}


def usage_options(asked: Any) -> dict[str, Any]:
    """The stream options a forwarded body goes with: usage always asked for (the metrics need
    it; the renderer withholds it from a client that did not ask), and usage on every chunk only
    if the client asked for usage at all, as a server would give it."""
    options = dict(asked) if isinstance(asked, dict) else {}
    if not options.get("include_usage"):
        options.pop("continuous_usage_stats", None)
    options["include_usage"] = True
    return options


class OpenAIOutbound:
    options_model = Options
    shared_credentials = False
    batch_prompts = True
    forwards_same_wire = True

    def trims(self, req: Request) -> bool:
        return req.wire in _CLIENT_NAMES

    def trimmed(self, req: Request, names: Sequence[str]) -> dict[str, Any]:
        fields = _CLIENT_NAMES[req.wire].fields(names)
        return {k: v for k, v in (req.raw or {}).items() if k not in fields}

    def carriage(self, req: Request, backend: BackendView[Options]) -> Carriage:
        if req.wire == responses.CARRIAGE.wire and backend.options.responses_api:
            return responses.CARRIAGE
        return _CARRIAGE[req.task, _vllm(backend)]

    def build(self, out: Outgoing[Options]) -> UpstreamCall:
        req = out.req
        path = PATHS[req.task]
        model = out.backend.model or req.model
        if out.same_wire and req.wire == responses.CARRIAGE.wire:
            return responses.forwarded(req, model)
        if out.same_wire and req.raw is not None:
            # Forward every field the client sent, known to us or not.
            body = dict(req.raw)
            if model is not None:
                body["model"] = model
            if req.stream:
                body["stream_options"] = usage_options(body.get("stream_options"))
            rename = jsonutil.dumps(req.model) if req.model and model and req.model != model else None
            return UpstreamCall(path, jsonutil.dumps(body), req.stream, passthrough=True, state=req, rename=rename)
        body = request_body(req, model, _vllm(out.backend))
        return UpstreamCall(path, jsonutil.dumps(body), req.stream, state=req)

    def parse_result(self, call: UpstreamCall, body: bytes, headers: Mapping[str, str]) -> Answer:
        if call.path == responses.PATH:
            return responses_reading.passthrough_body(body, call.rename, responses_reading.previous_of(call.state))
        if call.passthrough:
            return reading.passthrough_body(call.state, body, call.rename)
        return reading.parse_body(call.state, body)

    def stream_parser(self, call: UpstreamCall) -> StreamParser:
        if call.path == responses.PATH:
            return responses_reading.ResponsesStreamParser(
                passthrough=True, rename=call.rename, previous=responses_reading.previous_of(call.state)
            )
        req: Request = call.state
        return reading.OpenAIStreamParser(
            req.task is Task.CHAT, call.passthrough, call.rename, choices=req.params.choices
        )

    def error_message(self, status: int, body: bytes) -> str:
        return reading.error_message(body)

    def health_path(self, backend: BackendView[Options]) -> str:
        return "/v1/models"

    def models_path(self, backend: BackendView[Options]) -> str:
        return "/v1/models"

    def kv_source(self, backend: BackendView[Options], urls: Sequence[str]) -> KvSource:
        """vLLM-style servers keep their metrics page beside the API; the public API has none."""
        return KvSource(VLLM_PAGE, [(u, "/metrics") for u in urls] if _vllm(backend) else [])
