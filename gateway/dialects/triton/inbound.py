"""Triton as clients speak it: the generate extension plus KServe v2 health and metadata.

The model comes from the path and picks the route; the version, when given, is only echoed.
Errors are `{"error": "..."}` with Triton's statuses; health answers are empty bodies with 200
or 400, as Triton gives them.
"""

from typing import Any

from aiohttp import web

from gateway import jsonutil
from gateway.core.errors import GatewayError, InvalidRequest, Kind
from gateway.core.exchange import check_auth, handler
from gateway.core.routing import Route, RouteGroup
from gateway.core.types import Request, Task
from gateway.core.validation import load_object, validate
from gateway.dialects.base import SIMULATED_SERVER, Endpoint
from gateway.dialects.triton import render, servers
from gateway.dialects.triton.schema import GenerateParameters, merged_parameters, model_metadata, words
from gateway.health import READINESS

# Triton's codes: INVALID_ARG 400, NOT_FOUND 404, INTERNAL 500, UNAVAILABLE 503 (http_server.cc).
_STATUS = {
    Kind.VALIDATION: 400,
    Kind.AUTH: 401,
    Kind.PERMISSION: 403,
    Kind.NOT_FOUND: 404,
    Kind.TOO_LARGE: 400,
    Kind.CLIENT_TIMEOUT: 408,
    Kind.UNSUPPORTED: 400,
    Kind.RATE_LIMIT: 503,
    Kind.OVERLOADED: 503,
    Kind.UPSTREAM: 500,
    Kind.TIMEOUT: 500,
    Kind.UNAVAILABLE: 503,
    Kind.INTERNAL: 500,
}
# Knobs copied into neutral params under the same name when set.
_SAME = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "typical_p",
    "seed",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "do_sample",
    "ignore_eos",
    "skip_special_tokens",
    "include_stop_str_in_output",
)


def _parse(body: bytes, request: web.Request, stream: bool) -> Request:
    data = load_object(body)
    rid = data.get("id")
    if rid is not None and not isinstance(rid, str):
        raise InvalidRequest("'id' must be a string", param="id", code="invalid_value")
    text = data.get("text_input")
    if text is None:
        raise InvalidRequest("missing required input 'text_input'", param="text_input", code="invalid_value")
    if not isinstance(text, str):
        raise InvalidRequest("'text_input' must be a string", param="text_input", code="invalid_value")
    # A simulator reads the body as the server it imitates would; the gateway takes every name.
    flavor = servers.flavor_of(request.app.get(SIMULATED_SERVER))
    merged = servers.read_as(flavor, data, merged_parameters(data, servers.SAMPLING[flavor]), stream)
    m = validate(GenerateParameters, merged)
    params: dict[str, Any] = {}
    for name in _SAME:
        v = getattr(m, name)
        if v is not None:
            params[name] = v
    stop = words(m.stop)
    if stop:
        params["stop"] = stop
    bad = words(m.bad_words)
    if bad:
        params["bad_words"] = bad
    if m.stop_token_ids:
        params["stop_token_ids"] = m.stop_token_ids
    if m.beam_width is not None and m.beam_width > 1:
        params["beam_width"] = m.beam_width
    if m.n is not None and m.n > 1:
        raise InvalidRequest(
            "num_return_sequences > 1 is not supported on this endpoint",
            param="num_return_sequences",
            code="invalid_value",
        )
    if m.exclude_input_in_output is False and not stream and flavor is None:
        params["echo"] = True
    servers.adjust(flavor, m, params)
    version = request.match_info.get("version")
    return Request(
        task=Task.COMPLETION,
        inbound="triton",
        model=request.match_info["model"],
        prompt=text,
        stream=stream,
        params=params,
        raw=data,
        path_params={"version": version} if version else {},
    )


def parse_generate(body: bytes, request: web.Request) -> Request:
    return _parse(body, request, stream=False)


def parse_generate_stream(body: bytes, request: web.Request) -> Request:
    return _parse(body, request, stream=True)


def path_model(request: web.Request) -> str | None:
    return request.match_info["model"]


GENERATE = Endpoint(parse_generate, render.render_result, None, path_model)
GENERATE_STREAM = Endpoint(parse_generate_stream, render.render_result, render.stream_renderer, path_model)

_PLATFORMS = {"trtllm": "ensemble", "vllm": "vllm"}


def _platform(route: Route) -> str:
    flavor = getattr(route.backend.options, "flavor", None)
    if route.backend.conf.dialect == "triton" and isinstance(flavor, str):
        return _PLATFORMS.get(flavor, "python")
    return "python"


async def _ready(request: web.Request, routes: list[Route]) -> bool:
    readiness = request.app.get(READINESS)
    if readiness is None:
        return True  # the simulator: the model is in-process
    state, _cached = await readiness.state()
    return all(state.get(r.backend.name, {}).get("ready", False) for r in routes)


class TritonInbound:
    name = "triton"

    def paths(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            out += [("POST", base + "/generate"), ("POST", base + "/generate_stream")]
            out += [("GET", base), ("GET", base + "/ready")]
        return [("GET", "/v2/health/live"), ("GET", "/v2/health/ready"), *out]

    def error_response(self, err: GatewayError) -> web.Response:
        return web.Response(
            status=_STATUS.get(err.kind, err.status),
            body=jsonutil.dumps({"error": err.message}),
            content_type="application/json",
        )

    def mount(self, router: web.UrlDispatcher, prefix: str, group: RouteGroup) -> None:
        async def live(request: web.Request) -> web.Response:
            return web.Response(status=200)

        async def ready(request: web.Request) -> web.Response:
            return web.Response(status=200 if await _ready(request, group.routes) else 400)

        async def metadata(request: web.Request) -> web.Response:
            model = request.match_info["model"]
            try:
                check_auth(request)
                route = group.select(model)
            except GatewayError as e:
                return self.error_response(e)
            body = model_metadata(model, _platform(route))
            return web.Response(body=jsonutil.dumps(body), content_type="application/json")

        async def model_ready(request: web.Request) -> web.Response:
            try:
                route = group.select(request.match_info["model"])
            except GatewayError as e:
                return self.error_response(e)
            return web.Response(status=200 if await _ready(request, [route]) else 400)

        router.add_get(prefix + "/v2/health/live", live)
        router.add_get(prefix + "/v2/health/ready", ready)
        for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            router.add_post(prefix + base + "/generate", handler(GENERATE, group, self))
            router.add_post(prefix + base + "/generate_stream", handler(GENERATE_STREAM, group, self))
            router.add_get(prefix + base, metadata)
            router.add_get(prefix + base + "/ready", model_ready)
