"""The exchange handler: one client request from body to last byte, for every inbound dialect.

It reads and parses the body with the endpoint's codec, picks the route, asks the route's engine,
and renders the answer (whole or streamed) in the client's dialect. Errors before the response
headers become a proper status and error body; after them, an in-band error event and the
stream's terminator. A client that goes away cancels this task (the server runs with handler
cancellation), which closes the upstream connection on the way out.
"""

import asyncio
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import Histogram

from gateway.core import fanout
from gateway.core.errors import GatewayError, Overloaded, PayloadTooLarge, Unauthorized, UpstreamError
from gateway.core.params import DROPPED_HEADER
from gateway.core.routing import Route, RouteGroup
from gateway.core.types import Event, ReasoningDelta, Request, TextDelta, ToolCallDelta, UsageEvent
from gateway.dialects.base import SIMULATED_SERVER, Endpoint, Inbound, RenderContext
from gateway.logs import access_log
from gateway.metrics import Metrics

log = logging.getLogger("gateway")
REQUEST_ID = "X-Request-Id"
_TOKEN_EVENTS = (TextDelta, ToolCallDelta, ReasoningDelta)
# A client's request id is echoed, logged and forwarded, so only a plain token is taken as is.
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_of(request: web.Request) -> str:
    """The client's X-Request-Id when it is a plain token, else a fresh one."""
    given = request.headers.get(REQUEST_ID, "")
    return given if _CLIENT_ID.match(given) else os.urandom(16).hex()


@dataclass(eq=False)
class Services:
    """What every handler needs from the app; stored under one AppKey."""

    metrics: Metrics
    api_keys: frozenset[str] | None
    max_body_bytes: int
    max_concurrent: int
    in_flight: int = 0
    access_log: bool = True  # off for the gateway's in-process simulated backends


SERVICES = web.AppKey("services", Services)


@dataclass(eq=False, slots=True)
class Exchange:
    """Timings and outcome of one request, recorded into metrics when it ends."""

    start: float
    upstream_start: float = 0.0
    upstream_total: float = 0.0
    first_token: float = 0.0
    last_token: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # The route's inter-token histogram child, set once the route is known: each gap is
    # observed as it happens rather than collected.
    itl: Histogram | None = None
    upstream_error: str | None = None
    disconnect: str | None = None

    def upstream_done(self) -> None:
        if self.upstream_start:
            self.upstream_total += time.perf_counter() - self.upstream_start
            self.upstream_start = 0.0

    def observe(self, events: list[Event]) -> None:
        tokens = False
        for ev in events:
            if isinstance(ev, _TOKEN_EVENTS):
                tokens = True
            elif isinstance(ev, UsageEvent):
                u = ev.usage
                if u.prompt_tokens is not None:
                    self.prompt_tokens = u.prompt_tokens
                if u.completion_tokens is not None:
                    self.completion_tokens = u.completion_tokens
        if tokens:
            now = time.perf_counter()
            if self.first_token:
                if self.itl is not None:
                    self.itl.observe(now - self.last_token)
            else:
                self.first_token = now
            self.last_token = now


def check_auth(request: web.Request) -> None:
    """Raise Unauthorized unless auth is off or the request carries one of the configured keys."""
    keys = request.app[SERVICES].api_keys
    if keys is None:
        return
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or token.strip() not in keys:
        raise Unauthorized("Missing or invalid API key", code="invalid_api_key")


async def _read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"Request body is larger than the limit of {limit} bytes")
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"Request body is larger than the limit of {limit} bytes") from None


def handler(
    ep: Endpoint, group: RouteGroup, inbound: Inbound
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The aiohttp handler of one inference path: `serve` bound to its endpoint and routes."""

    async def handle(request: web.Request) -> web.StreamResponse:
        return await serve(request, ep, group, inbound)

    return handle


async def serve(request: web.Request, ep: Endpoint, group: RouteGroup, inbound: Inbound) -> web.StreamResponse:
    svc = request.app[SERVICES]
    ex = Exchange(time.perf_counter())
    request_id = request_id_of(request)
    route: Route | None = None
    status = 500
    counted = False
    try:
        check_auth(request)
        body = await _read_body(request, svc.max_body_bytes)
        req = ep.parse(body, request)
        req.request_id = request_id
        route = group.select(ep.path_model(request) if ep.path_model else req.model)
        if svc.in_flight >= svc.max_concurrent:
            raise Overloaded("The gateway is at its concurrent request limit; retry later")
        svc.in_flight += 1
        counted = True
        if svc.metrics.enabled:
            rm = svc.metrics.route(route.name, route.backend.name)
            rm.in_flight.inc()
            ex.itl = rm.itl
        ctx = RenderContext(
            request_id=request_id,
            created=int(time.time()),
            model=req.model or route.backend.model or route.name,
            passthrough=route.engine.passthrough_dialect == req.inbound,
            started=ex.start,
            server=request.app.get(SIMULATED_SERVER),
        )
        if req.stream and ep.stream_renderer is not None:
            resp = await _stream(request, ep, route, req, ctx, ex, inbound)
            status = resp.status
            return resp
        result = await fanout.complete(route.engine, req, ex)
        out = result.passthrough if result.passthrough is not None else ep.render_result(result, req, ctx)
        if result.usage is not None:
            ex.prompt_tokens = result.usage.prompt_tokens
            ex.completion_tokens = result.usage.completion_tokens
        headers = {REQUEST_ID: request_id}
        if req.dropped:
            headers[DROPPED_HEADER] = ",".join(req.dropped)
        status = 200
        return web.Response(body=out, content_type=ep.content_type, headers=headers)
    except GatewayError as e:
        if isinstance(e, UpstreamError):
            ex.upstream_error = e.upstream_class.value
            log.debug("request %s: upstream error (%s): %s", request_id, ex.upstream_error, e)
        resp = inbound.error_response(e)
        resp.headers[REQUEST_ID] = request_id
        status = resp.status
        return resp
    except (asyncio.CancelledError, ConnectionResetError):
        # Cancelled: the server noticed the client left; reset: a write found it gone.
        status = 499
        ex.disconnect = "streaming" if ex.first_token else "before_first_token"
        raise
    finally:
        if counted and route is not None:
            svc.in_flight -= 1
            if svc.metrics.enabled:
                svc.metrics.route(route.name, route.backend.name).in_flight.dec()
        _record(svc.metrics, route, group, ex, status)
        if svc.access_log:
            _access(request, request_id, route, group, ex, status)


async def _stream(
    request: web.Request,
    ep: Endpoint,
    route: Route,
    req: Request,
    ctx: RenderContext,
    ex: Exchange,
    inbound: Inbound,
) -> web.StreamResponse:
    assert ep.stream_renderer is not None
    stream = await fanout.open_stream(route.engine, req, ex)
    try:
        renderer = ep.stream_renderer(req, ctx)
        # Wait for the first events before sending headers: a backend that fails at once
        # still gets the client a real error status instead of a 200 with an error inside.
        first = await stream.next()
        resp = web.StreamResponse(status=200)
        resp.content_type = renderer.content_type
        resp.headers["Cache-Control"] = "no-cache"
        resp.headers["X-Accel-Buffering"] = "no"
        resp.headers[REQUEST_ID] = ctx.request_id
        if req.dropped:
            resp.headers[DROPPED_HEADER] = ",".join(req.dropped)
        await resp.prepare(request)
        try:
            out = renderer.start()
            if first:
                ex.observe(first)
                out += renderer.render(first)
            if out:
                await resp.write(out)
            if first is not None:
                while (events := await stream.next()) is not None:
                    ex.observe(events)
                    out = renderer.render(events)
                    if out:
                        await resp.write(out)
            tail = renderer.end()
        except ConnectionResetError:
            raise
        except GatewayError as e:
            if isinstance(e, UpstreamError):
                ex.upstream_error = e.upstream_class.value
            tail = renderer.error(e) + renderer.end()
        except Exception:
            # A bug must not leave the client hanging on a half-written stream.
            log.exception("unhandled error while streaming %s", request.path)
            tail = renderer.error(GatewayError("internal gateway error")) + renderer.end()
        if tail:
            await resp.write(tail)
        await resp.write_eof()
        return resp
    finally:
        await stream.aclose()


def _record(metrics: Metrics, route: Route | None, group: RouteGroup, ex: Exchange, status: int) -> None:
    if not metrics.enabled:
        return
    now = time.perf_counter()
    if route is None:
        # No route chosen (bad body, unknown model): counted against the group's first route so
        # the request is visible without letting a client-chosen name become a label.
        r = group.routes[0]
        metrics.count_request(r.name, r.backend.name, group.dialect, r.backend.conf.dialect, str(status))
        return
    b = route.backend.name
    rm = metrics.route(route.name, b)
    metrics.count_request(route.name, b, group.dialect, route.backend.conf.dialect, str(status))
    total = now - ex.start
    rm.duration.observe(total)
    if ex.upstream_total:
        rm.upstream.observe(ex.upstream_total)
        rm.overhead.observe(max(total - ex.upstream_total, 0.0))
    if ex.first_token:
        rm.ttft.observe(ex.first_token - ex.start)
    if ex.prompt_tokens:
        rm.prompt_tokens.inc(ex.prompt_tokens)
    if ex.completion_tokens:
        rm.completion_tokens.inc(ex.completion_tokens)
    if ex.upstream_error:
        metrics.upstream_errors.labels(route.name, b, ex.upstream_error).inc()
    if ex.disconnect:
        metrics.disconnects.labels(route.name, ex.disconnect).inc()


def _ms(seconds: float) -> float | None:
    return round(seconds * 1000.0, 3) if seconds else None


def _access(
    request: web.Request, request_id: str, route: Route | None, group: RouteGroup, ex: Exchange, status: int
) -> None:
    """The one access-log line of this request: names, status, timings, token counts; no content."""
    backend = route.backend if route is not None else None
    access_log(
        {
            "request_id": request_id,
            "route": route.name if route is not None else None,
            "backend": backend.name if backend is not None else None,
            "inbound": group.dialect,
            "outbound": backend.conf.dialect if backend is not None else None,
            "method": request.method,
            "path": request.path,
            "status": status,
            "duration_ms": _ms(time.perf_counter() - ex.start),
            "upstream_ms": _ms(ex.upstream_total),
            "ttft_ms": _ms(ex.first_token - ex.start) if ex.first_token else None,
            "prompt_tokens": ex.prompt_tokens,
            "completion_tokens": ex.completion_tokens,
            "upstream_error": ex.upstream_error,
            "disconnect": ex.disconnect,
        }
    )
