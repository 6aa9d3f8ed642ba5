"""The exchange handler: one client request from body to last byte, for every inbound dialect.

It reads and parses the body with the endpoint's codec, picks the route, asks the route's engine,
and renders the answer (whole or streamed) in the client's dialect. Errors before the response
headers become a proper status and error body; after them, an in-band error event and the
stream's terminator. A client that goes away cancels this task (the server runs with handler
cancellation), which closes the upstream connection on the way out.
"""

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from aiohttp import web

from gateway.core.errors import GatewayError, Overloaded, PayloadTooLarge, Unauthorized, UpstreamError
from gateway.core.params import DROPPED_HEADER
from gateway.core.routing import Route, RouteGroup
from gateway.core.types import Event, ReasoningDelta, Request, TextDelta, ToolCallDelta, UsageEvent
from gateway.dialects.base import Endpoint, Inbound, RenderContext
from gateway.metrics import Metrics

log = logging.getLogger("gateway")
REQUEST_ID = "X-Request-Id"
_TOKEN_EVENTS = (TextDelta, ToolCallDelta, ReasoningDelta)


@dataclass(eq=False)
class Services:
    """What every handler needs from the app; stored under one AppKey."""

    metrics: Metrics
    api_keys: frozenset[str] | None
    max_body_bytes: int
    max_concurrent: int
    in_flight: int = 0


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
    itl: list[float] = field(default_factory=list)
    upstream_error: str | None = None

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
                self.itl.append(now - self.last_token)
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


async def serve(request: web.Request, ep: Endpoint, group: RouteGroup, inbound: Inbound) -> web.StreamResponse:
    svc = request.app[SERVICES]
    ex = Exchange(time.perf_counter())
    request_id = request.headers.get(REQUEST_ID) or uuid.uuid4().hex
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
        svc.metrics.in_flight.labels(route.name).inc()
        ctx = RenderContext(
            request_id=request_id,
            created=int(time.time()),
            model=req.model or route.backend.model or route.name,
            passthrough=route.engine.passthrough_dialect == req.inbound,
        )
        if req.stream and ep.stream_renderer is not None:
            resp = await _stream(request, ep, route, req, ctx, ex, inbound)
            status = resp.status
            return resp
        result = await route.engine.complete(req, ex)
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
        resp = inbound.error_response(e)
        resp.headers[REQUEST_ID] = request_id
        status = resp.status
        return resp
    except asyncio.CancelledError:
        status = 499
        if route is not None:
            phase = "streaming" if ex.first_token else "before_first_token"
            svc.metrics.disconnects.labels(route.name, phase).inc()
        raise
    finally:
        if counted and route is not None:
            svc.in_flight -= 1
            svc.metrics.in_flight.labels(route.name).dec()
        _record(svc.metrics, route, group, ex, status)


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
    stream = await route.engine.open_stream(req, ex)
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
    now = time.perf_counter()
    if route is None:
        # No route chosen (bad body, unknown model): counted against the group's first route so
        # the request is visible without letting a client-chosen name become a label.
        r = group.routes[0]
        metrics.requests.labels(r.name, r.backend.name, group.dialect, r.backend.conf.dialect, str(status)).inc()
        return
    b = route.backend.name
    metrics.requests.labels(route.name, b, group.dialect, route.backend.conf.dialect, str(status)).inc()
    total = now - ex.start
    metrics.duration.labels(route.name, b).observe(total)
    if ex.upstream_total:
        metrics.upstream.labels(route.name, b).observe(ex.upstream_total)
        metrics.overhead.labels(route.name, b).observe(max(total - ex.upstream_total, 0.0))
    if ex.first_token:
        metrics.ttft.labels(route.name, b).observe(ex.first_token - ex.start)
    if ex.itl:
        h = metrics.itl.labels(route.name, b)
        for gap in ex.itl:
            h.observe(gap)
    if ex.prompt_tokens:
        metrics.tokens.labels(route.name, b, "prompt").inc(ex.prompt_tokens)
    if ex.completion_tokens:
        metrics.tokens.labels(route.name, b, "completion").inc(ex.completion_tokens)
    if ex.upstream_error:
        metrics.upstream_errors.labels(route.name, b, ex.upstream_error).inc()
