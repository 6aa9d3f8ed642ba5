"""MindIE as clients speak it: every route of its business plane the gateway serves, and errors.

Routes: POST /infer, /infer_token (native), /generate (TGI body with `inputs`, or vLLM body with
`prompt`, told apart the way MindIE does: a non-null `prompt` first), /generate_stream and /
(TGI-style, wire shared with gateway.dialects.tgi), /v1/chat/completions, /v1/completions
(OpenAI-flavoured); GET /v1/models, /health, /health/timed[-N].
"""

import time
from typing import Any

from aiohttp import web

from gateway import jsonutil
from gateway.core.errors import GatewayError, InvalidRequest, Kind, NotFound
from gateway.core.exchange import check_auth, handler
from gateway.core.routing import RouteGroup
from gateway.core.types import EmbeddingResult, Request, Result
from gateway.core.validation import load_object
from gateway.dialects.base import Endpoint, RenderContext, StreamRenderer
from gateway.dialects.mindie import chat, native
from gateway.dialects.mindie.schema import TGIRequest
from gateway.dialects.tgi import wire

_STATUS = {
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

TGI_STYLE = wire.Flavour(
    name="mindie-tgi",
    space=True,
    index=False,
    prompt_sep=" ",
    prompt_tokens=True,
    input_length=False,
    detail_tokens_null=True,
    unknown_id=None,
    error_frame=native.raw_error,
)


def _tgi(data: dict[str, Any], stream: bool) -> Request:
    req = wire.parse_generate(data, TGIRequest, "mindie", stream)
    req.params.setdefault("max_tokens", native.MINDIE_DEFAULT_MAX_NEW_TOKENS)
    return req


def _is_vllm(req: Request) -> bool:
    return (req.raw or {}).get("prompt") is not None


def parse_generate(body: bytes, request: web.Request | None = None) -> Request:
    data = load_object(body)
    if data.get("prompt") is not None:
        return chat.parse_vllm_generate(data)
    if data.get("inputs") is not None:
        return _tgi(data, False)  # MindIE's TGI /generate never streams
    raise InvalidRequest("the body needs `inputs` (TGI form) or `prompt` (vLLM form)", param="inputs")


def render_generate(result: Result | EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    if _is_vllm(req):
        return chat.render_vllm(result, req, ctx)
    return _TGI_OBJECT(result, req, ctx)


def generate_stream_renderer(req: Request, ctx: RenderContext) -> StreamRenderer:
    if _is_vllm(req):
        return chat.VllmStreamRenderer(req, ctx)
    return wire.TGIStreamRenderer(TGI_STYLE, req, ctx)


def _parse_stream(body: bytes, request: web.Request | None = None) -> Request:
    return _tgi(load_object(body), True)


def _parse_compat(body: bytes, request: web.Request | None = None) -> Request:
    data = load_object(body)
    return _tgi(data, data.get("stream") is True)


_TGI_OBJECT = wire.render_result(TGI_STYLE, array=False)
INFER = Endpoint(native.parse_infer, native.render_infer, native.NativeStreamRenderer)
GENERATE = Endpoint(parse_generate, render_generate, generate_stream_renderer)
GENERATE_STREAM = Endpoint(_parse_stream, _TGI_OBJECT, wire.stream_renderer(TGI_STYLE))
COMPAT = Endpoint(_parse_compat, wire.render_result(TGI_STYLE, array=True), wire.stream_renderer(TGI_STYLE))
CHAT = Endpoint(chat.parse_chat, chat.render_chat, chat.ChatStreamRenderer)
COMPLETION = Endpoint(chat.parse_completion, chat.render_completion, chat.CompletionStreamRenderer)


def error_body(err: GatewayError) -> tuple[int, bytes]:
    status, kind = _STATUS[err.kind]
    if err.kind is Kind.UPSTREAM and err.status == 500:
        status, kind = 500, "Incomplete Generation"  # the backend's own 500 keeps its meaning
    return status, jsonutil.dumps({"error": err.message, "error_type": kind})


class MindIEInbound:
    name = "mindie"

    def paths(self) -> list[tuple[str, str]]:
        return [
            ("POST", "/infer"),
            ("POST", "/infer_token"),
            ("POST", "/generate"),
            ("POST", "/generate_stream"),
            ("POST", "/"),
            ("POST", "/v1/chat/completions"),
            ("POST", "/v1/completions"),
            ("GET", "/v1/models"),
            ("GET", "/health"),
            ("GET", "/health/timed"),
            ("GET", "/health/{timed}"),
        ]

    def error_response(self, err: GatewayError) -> web.Response:
        status, body = error_body(err)
        return web.Response(status=status, body=body, content_type="application/json")

    def mount(self, router: web.UrlDispatcher, prefix: str, group: RouteGroup) -> None:
        started = int(time.time())

        async def list_models(request: web.Request) -> web.Response:
            try:
                check_auth(request)
            except GatewayError as e:
                return self.error_response(e)
            data = [
                {"id": m, "object": "model", "created": started, "owned_by": "MindIE Server"} for m in group.model_ids()
            ]
            return web.json_response({"object": "list", "data": data}, dumps=jsonutil.dumps_str)

        async def health(request: web.Request) -> web.Response:
            return web.Response(status=200)

        async def health_timed(request: web.Request) -> web.Response:
            tail = request.match_info.get("timed")
            if tail is not None:
                n = tail.removeprefix("timed-")
                if not tail.startswith("timed-") or not n.isdigit() or not 1 <= int(n) <= 600:
                    return self.error_response(NotFound(f"{request.path}: the wait must be an integer in [1, 600]"))
            return web.json_response({"status": "healthy"}, dumps=jsonutil.dumps_str)

        for path in ("/infer", "/infer_token"):
            router.add_post(prefix + path, handler(INFER, group, self))
        router.add_post(prefix + "/generate", handler(GENERATE, group, self))
        router.add_post(prefix + "/generate_stream", handler(GENERATE_STREAM, group, self))
        router.add_post(prefix + "/", handler(COMPAT, group, self))
        if prefix:
            router.add_post(prefix, handler(COMPAT, group, self))
        router.add_post(prefix + "/v1/chat/completions", handler(CHAT, group, self))
        router.add_post(prefix + "/v1/completions", handler(COMPLETION, group, self))
        router.add_get(prefix + "/v1/models", list_models)
        router.add_get(prefix + "/health", health)
        router.add_get(prefix + "/health/timed", health_timed)
        router.add_get(prefix + "/health/{timed}", health_timed)
