"""MindIE as clients speak it: every route of its business plane the gateway serves, and errors.

Routes: POST /infer, /infer_token (native), /generate (TGI body with `inputs`, or vLLM body with
`prompt`, told apart the way MindIE does: a non-null `prompt` first), /generate_stream and /
(TGI-style), /v1/chat/completions, /v1/completions (OpenAI-flavoured, parsed by the OpenAI
dialect with MindIE's own schema); GET /v1/models, /health, /health/timed[-N]. See
docs/dialects/mindie.md.
"""

from collections.abc import Sequence
from typing import Any

from gateway import jsonutil
from gateway.codec.contract import Caller, Endpoint, GroupView, Mount, PathValues, Reply, StreamRenderer
from gateway.codec.errors import ErrorTable, stated
from gateway.codec.validation import load_object, validate
from gateway.dialects.mindie import render
from gateway.dialects.mindie.outbound import WIRE
from gateway.dialects.mindie.params import NATIVE_IN, VLLM_GENERATE_IN
from gateway.dialects.mindie.schema import (
    InferRequest,
    MindIEChatRequest,
    MindIECompletionRequest,
    TGIRequest,
    VllmGenerateRequest,
)
from gateway.dialects.openai import inbound as openai
from gateway.dialects.openai import render as openai_render
from gateway.dialects.openai import stream as openai_stream
from gateway.dialects.tgi import inbound as tgi
from gateway.dialects.tgi import render as tgi_render
from gateway.neutral import params as neutral
from gateway.neutral.errors import GatewayError, InvalidRequest, Kind, NotFound, Unsupported
from gateway.neutral.types import Answer, Message, Request, Task

# What the native and TGI-style routes generate when the client gives no max_new_tokens.
DEFAULT_MAX_NEW_TOKENS = 20
_MEDIA = ("image_url", "video_url", "audio_url")

# MindIE's status and `error_type` for each kind.
ERRORS: ErrorTable = {
    Kind.VALIDATION: (422, "Input Validation Error"),
    Kind.UNSUPPORTED: (422, "Input Validation Error"),
    Kind.TOO_LARGE: (422, "Input Validation Error"),
    Kind.CLIENT_TIMEOUT: (408, "Request Timeout"),
    Kind.NOT_FOUND: (404, "NotFoundError"),
    Kind.AUTH: (401, "Unauthorized"),
    Kind.PERMISSION: (403, "Forbidden"),
    Kind.RATE_LIMIT: (429, "Too Many Requests"),
    Kind.OVERLOADED: (503, "Service Unavailable"),
    Kind.UPSTREAM: (424, "Generation Error"),
    Kind.TIMEOUT: (500, "Incomplete Generation"),
    Kind.UNAVAILABLE: (503, "Service Unavailable"),
    Kind.INTERNAL: (500, "Incomplete Generation"),
}


# ---- native ------------------------------------------------------------------------------


def parse_infer(body: bytes, path: PathValues | None = None) -> Request:
    data = load_object(body)
    m = validate(InferRequest, data)
    params = tgi.neutral_params(m.parameters, NATIVE_IN)
    if params.max_tokens is None:
        params = params.replace(max_tokens=DEFAULT_MAX_NEW_TOKENS)
    return Request(
        task=Task.COMPLETION,
        wire=WIRE,
        prompt=None if m.input_id is not None else m.inputs,
        prompt_ids=list(m.input_id) if m.input_id is not None else None,
        stream=bool(m.stream),
        params=params,
        raw=data,
        wants_token_ids=True,
    )


# ---- OpenAI routes -------------------------------------------------------------------------


def _plain_to_url(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """MindIE media parts carry a plain string; the neutral (OpenAI) form wants {"url": ...}."""
    return [
        {**p, p["type"]: {"url": p[p["type"]]}} if p.get("type") in _MEDIA and isinstance(p.get(p["type"]), str) else p
        for p in parts
    ]


def _mindie_way(req: Request) -> Request:
    """What MindIE reads differently from OpenAI in the same fields."""
    raw = req.raw or {}
    if raw.get("use_beam_search"):
        raise Unsupported("use_beam_search is not supported by the gateway", param="use_beam_search")
    p = req.params
    if p.top_k == 0:
        p = p.replace(top_k=None)  # MindIE's own examples send 0 for "not set"
    if raw.get("top_logprobs") is not None and req.task is Task.CHAT:
        p = p.replace(logprobs=True)  # MindIE: top_logprobs alone implies logprobs
    if raw.get("best_of") not in (None, 1):
        p = p.replace(best_of=raw["best_of"])
    messages = req.messages
    if messages is not None:
        messages = [
            Message(m.role, _plain_to_url(m.content), m.name, m.tool_calls, m.tool_call_id, m.reasoning_content)
            if isinstance(m.content, list)
            else m
            for m in messages
        ]
    return req.but(params=p, messages=messages)


def parse_chat(body: bytes, path: PathValues | None = None) -> Request:
    return _mindie_way(openai.parse_chat(body, path, schema=MindIEChatRequest, wire=WIRE))


def parse_completion(body: bytes, path: PathValues | None = None) -> Request:
    # MindIE's default is its maxIterTimes, not OpenAI's 16: no max_tokens unless the client said.
    req = openai.parse_completion(body, path, schema=MindIECompletionRequest, wire=WIRE, default_max_tokens=None)
    return _mindie_way(req)


# ---- /generate (vLLM or TGI body) and the TGI-style routes ---------------------------------


def parse_vllm_generate(data: dict[str, Any]) -> Request:
    m = validate(VllmGenerateRequest, data)
    values = VLLM_GENERATE_IN.read(m.__dict__)
    if values.get("top_k") in (0, -1):
        del values["top_k"]
    return Request(
        task=Task.COMPLETION,
        wire=WIRE,
        prompt=m.prompt,
        stream=bool(m.stream),
        params=neutral.make(values),
        raw=data,
    )


def _tgi(data: dict[str, Any], stream: bool) -> Request:
    return tgi.parse_generate(data, TGIRequest, WIRE, stream, default_max_tokens=DEFAULT_MAX_NEW_TOKENS)


def _is_vllm(req: Request) -> bool:
    return (req.raw or {}).get("prompt") is not None


def parse_generate(body: bytes, path: PathValues | None = None) -> Request:
    data = load_object(body)
    if data.get("prompt") is not None:
        return parse_vllm_generate(data)
    if data.get("inputs") is not None:
        return _tgi(data, False)  # MindIE's TGI /generate never streams
    raise InvalidRequest("the body needs `inputs` (TGI form) or `prompt` (vLLM form)", param="inputs")


_TGI_OBJECT = tgi_render.render_result(render.TGI_STYLE, array=False)


def render_generate(result: Answer, req: Request, ctx: Any) -> bytes:
    if _is_vllm(req):
        return render.render_vllm(result, req, ctx)
    return _TGI_OBJECT(result, req, ctx)


def generate_stream_renderer(req: Request, ctx: Any) -> StreamRenderer:
    if _is_vllm(req):
        return render.VllmStreamRenderer(req, ctx)
    return tgi_render.TGIStreamRenderer(render.TGI_STYLE, req, ctx)


def _parse_stream(body: bytes, path: PathValues | None = None) -> Request:
    return _tgi(load_object(body), True)


def _parse_compat(body: bytes, path: PathValues | None = None) -> Request:
    data = load_object(body)
    return _tgi(data, data.get("stream") is True)


_OPENAI_ANSWER = openai_render.result_renderer(render.OPENAI_ROUTES)
_OPENAI_STREAM = openai_stream.stream_renderer(render.OPENAI_ROUTES)
INFER = Endpoint(parse_infer, render.render_infer, render.NativeStreamRenderer)
GENERATE = Endpoint(parse_generate, render_generate, generate_stream_renderer)
GENERATE_STREAM = Endpoint(_parse_stream, _TGI_OBJECT, tgi_render.stream_renderer(render.TGI_STYLE))
COMPAT = Endpoint(
    _parse_compat,
    tgi_render.render_result(render.TGI_STYLE, array=True),
    tgi_render.stream_renderer(render.TGI_STYLE),
)
CHAT = Endpoint(parse_chat, _OPENAI_ANSWER, _OPENAI_STREAM)
COMPLETION = Endpoint(parse_completion, _OPENAI_ANSWER, _OPENAI_STREAM)


# ---- the dialect's own paths ----------------------------------------------------------------


def error_reply(err: GatewayError) -> Reply:
    status, kind = stated(ERRORS, err)
    if err.kind is Kind.UPSTREAM and err.status == 500:
        status, kind = 500, "Incomplete Generation"  # the backend's own 500 keeps its meaning
    return Reply(status, jsonutil.dumps({"error": err.message, "error_type": kind}))


async def list_models(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    data = [openai.model_object(m, "MindIE Server") for m in group.model_ids()]
    return Reply(body=jsonutil.dumps({"object": "list", "data": data}))


async def health(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    return Reply(body=None)


async def health_timed(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    tail = path.get("timed")
    if tail is not None:
        n = tail.removeprefix("timed-")
        if not tail.startswith("timed-") or not n.isdigit() or not 1 <= int(n) <= 600:
            raise NotFound(f"/health/{tail}: the wait must be an integer in [1, 600]")
    return Reply(body=jsonutil.dumps({"status": "healthy"}))


class MindIEInbound:
    mounts: Sequence[Mount] = (
        Mount("POST", "/infer", INFER),
        Mount("POST", "/infer_token", INFER),
        Mount("POST", "/generate", GENERATE),
        Mount("POST", "/generate_stream", GENERATE_STREAM),
        Mount("POST", "/", COMPAT),
        Mount("POST", "/v1/chat/completions", CHAT),
        Mount("POST", "/v1/completions", COMPLETION),
        Mount("GET", "/v1/models", info=list_models),
        Mount("GET", "/health", info=health, auth=False),
        Mount("GET", "/health/timed", info=health_timed, auth=False),
        Mount("GET", "/health/{timed}", info=health_timed, auth=False),
    )

    def error_reply(self, err: GatewayError) -> Reply:
        return error_reply(err)
