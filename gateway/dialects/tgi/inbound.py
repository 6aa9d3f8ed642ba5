"""TGI as clients speak it: POST /generate, /generate_stream, / (compat); GET /info, /health."""

from typing import Any

from aiohttp import web

from gateway import __version__, jsonutil
from gateway.core.errors import GatewayError, Kind
from gateway.core.exchange import check_auth, handler
from gateway.core.routing import RouteGroup
from gateway.core.types import Request
from gateway.core.validation import load_object
from gateway.dialects.base import Endpoint
from gateway.dialects.tgi import wire
from gateway.dialects.tgi.schema import GenerateRequest

_STATUS = {
    Kind.VALIDATION: (422, "validation"),
    Kind.UNSUPPORTED: (422, "validation"),
    Kind.TOO_LARGE: (422, "validation"),
    Kind.CLIENT_TIMEOUT: (408, "validation"),
    Kind.NOT_FOUND: (404, "not_found"),
    Kind.AUTH: (401, "authentication"),
    Kind.PERMISSION: (403, "authentication"),
    Kind.RATE_LIMIT: (429, "overloaded"),
    Kind.OVERLOADED: (429, "overloaded"),
    Kind.UPSTREAM: (424, "generation"),
    Kind.TIMEOUT: (500, "incomplete_generation"),
    Kind.UNAVAILABLE: (503, "unhealthy"),
    Kind.INTERNAL: (500, "incomplete_generation"),
}


def error_body(err: GatewayError, stream: bool = False) -> dict[str, str]:
    kind = "incomplete_generation_stream" if stream and err.kind is not Kind.VALIDATION else _STATUS[err.kind][1]
    return {"error": err.message, "error_type": kind}


def _error_frame(err: GatewayError) -> bytes:
    return b"data:" + jsonutil.dumps(error_body(err, stream=True)) + b"\n\n"


FLAVOUR = wire.Flavour(
    name="tgi",
    space=False,
    index=True,
    prompt_sep="",
    prompt_tokens=False,
    input_length=True,
    detail_tokens_null=False,
    unknown_id=0,  # TGI clients require an integer; 0 marks "not known"
    error_frame=_error_frame,
    id_lists=False,
)


def _parse(stream: bool | None) -> Any:
    def parse(body: bytes, request: web.Request | None = None) -> Request:
        data = load_object(body)
        return wire.parse_generate(data, GenerateRequest, "tgi", bool(data.get("stream")) if stream is None else stream)

    return parse


GENERATE = Endpoint(_parse(False), wire.render_result(FLAVOUR, array=False), None)
GENERATE_STREAM = Endpoint(_parse(True), wire.render_result(FLAVOUR, array=False), wire.stream_renderer(FLAVOUR))
COMPAT = Endpoint(_parse(None), wire.render_result(FLAVOUR, array=True), wire.stream_renderer(FLAVOUR))


class TGIInbound:
    name = "tgi"

    def paths(self) -> list[tuple[str, str]]:
        return [
            ("POST", "/generate"),
            ("POST", "/generate_stream"),
            ("POST", "/"),
            ("GET", "/info"),
            ("GET", "/health"),
        ]

    def error_response(self, err: GatewayError) -> web.Response:
        status = _STATUS[err.kind][0]
        return web.Response(status=status, body=jsonutil.dumps(error_body(err)), content_type="application/json")

    def mount(self, router: web.UrlDispatcher, prefix: str, group: RouteGroup) -> None:
        async def info(request: web.Request) -> web.Response:
            try:
                check_auth(request)
            except GatewayError as e:
                return self.error_response(e)
            ids = group.model_ids()
            body = {
                "model_id": ids[0] if ids else None,
                "model_sha": None,
                "model_pipeline_tag": "text-generation",
                "max_concurrent_requests": 128,
                "max_best_of": 1,
                "max_stop_sequences": 4,
                "max_input_tokens": None,
                "max_total_tokens": None,
                "validation_workers": 1,
                "max_client_batch_size": 1,
                "router": "llm-gateway",
                "version": __version__,
                "sha": None,
                "docker_label": None,
            }
            return web.json_response(body, dumps=jsonutil.dumps_str)

        async def health(request: web.Request) -> web.Response:
            return web.Response(status=200)

        router.add_post(prefix + "/generate", handler(GENERATE, group, self))
        router.add_post(prefix + "/generate_stream", handler(GENERATE_STREAM, group, self))
        router.add_post(prefix + "/", handler(COMPAT, group, self))
        if prefix:
            router.add_post(prefix, handler(COMPAT, group, self))
        router.add_get(prefix + "/info", info)
        router.add_get(prefix + "/health", health)
