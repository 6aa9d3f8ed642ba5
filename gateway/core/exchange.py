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
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError
from prometheus_client import Histogram

from gateway.config import Limits
from gateway.core import fanout
from gateway.core.admission import Budget, Ticket
from gateway.core.errors import (
    GatewayError,
    InvalidRequest,
    PayloadTooLarge,
    RequestTimeout,
    Unauthorized,
    UpstreamError,
)
from gateway.core.params import DROPPED_HEADER
from gateway.core.peers import Network, client_address, key_id
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
    # API key -> the name the access log gives it; None when auth is off.
    api_keys: dict[str, str] | None
    limits: Limits
    budget: Budget
    trusted_proxies: list[Network] = field(default_factory=list)
    access_log: bool = True  # off for the gateway's in-process simulated backends

    @classmethod
    def of(cls, metrics: Metrics, limits: Limits, api_keys: Iterable[str] | None = None) -> "Services":
        return cls(
            metrics=metrics,
            api_keys=None if api_keys is None else {k: key_id(k) for k in api_keys},
            limits=limits,
            budget=Budget(limits.max_concurrent_requests, limits.max_buffered_body_bytes),
        )


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
    key: str | None = None  # the API key's log name

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


def check_auth(request: web.Request) -> str | None:
    """The key's log name (None when auth is off); Unauthorized unless the request carries one of
    the configured keys."""
    keys = request.app[SERVICES].api_keys
    if keys is None:
        return None
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    name = keys.get(token.strip()) if scheme.lower() == "bearer" else None
    if name is None:
        raise Unauthorized("Missing or invalid API key", code="invalid_api_key")
    return name


async def _read_body(request: web.Request, svc: Services, ticket: Ticket) -> bytes:
    """The whole body, within the size limit and the body deadline, with room reserved for it
    in the gateway-wide body budget before a byte is read."""
    limit = svc.limits.max_body_bytes
    too_large = f"Request body is larger than the limit of {limit} bytes"
    length = request.content_length
    if length is not None and length > limit:
        raise PayloadTooLarge(too_large)
    svc.budget.reserve_body(ticket, limit if length is None else length)
    deadline = svc.limits.client_body_timeout_s
    try:
        async with asyncio.timeout(deadline):
            body = await request.read()
    except TimeoutError:
        raise RequestTimeout(f"The request body did not arrive within {deadline:g}s") from None
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(too_large) from None
    except RequestPayloadError:
        raise InvalidRequest(
            "The request body could not be read: it does not decode as its Content-Encoding says, or it broke off",
            code="invalid_body",
        ) from None
    svc.budget.settle_body(ticket, len(body))
    return body


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
    ticket = Ticket()
    body_read = False
    try:
        ex.key = check_auth(request)
        # The slot and the body's room are taken before the body is read: a flood of slow or
        # unfinished bodies meets the limits, not the memory.
        svc.budget.take_slots(ticket, 1)
        body = await _read_body(request, svc, ticket)
        body_read = True
        req = ep.parse(body, request)
        req.request_id = request_id
        req.body_bytes = len(body)
        route = group.select(ep.path_model(request) if ep.path_model else req.model)
        width = fanout.width(route.engine, req)
        if width > svc.limits.max_fanout:
            raise InvalidRequest(
                f"This request would take {width} upstream requests (prompts x choices) and the limit is "
                f"{svc.limits.max_fanout}; send fewer prompts or choices",
                param="n",
                code="too_many_choices",
            )
        svc.budget.take_slots(ticket, width - 1)
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
        if not body_read:
            # Refused before its body was read (too large, too slow, undecodable, over a limit):
            # the connection closes rather than wait for the rest of a body no one will read.
            resp.force_close()
        status = resp.status
        return resp
    except asyncio.CancelledError:
        # The server noticed the client left: the task is cancelled, which closes the upstream.
        status = 499
        ex.disconnect = "streaming" if ex.first_token else "before_first_token"
        raise
    finally:
        svc.budget.release(ticket)
        if counted and route is not None and svc.metrics.enabled:
            svc.metrics.route(route.name, route.backend.name).in_flight.dec()
        if ex.disconnect:
            status = 499
        _record(svc.metrics, route, group, ex, status)
        if svc.access_log:
            _access(request, request_id, route, group, ex, status, svc.trusted_proxies)


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
        try:
            await resp.prepare(request)
        except ConnectionResetError:
            ex.disconnect = "before_first_token"
            return resp
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
            # A write found the client gone: normal, and the upstream closes on the way out.
            ex.disconnect = "streaming" if ex.first_token else "before_first_token"
            return resp
        except GatewayError as e:
            if isinstance(e, UpstreamError):
                ex.upstream_error = e.upstream_class.value
            tail = renderer.error(e) + renderer.end()
        except Exception:
            # A bug must not leave the client hanging on a half-written stream.
            log.exception("unhandled error while streaming %s", request.path)
            tail = renderer.error(GatewayError("internal gateway error")) + renderer.end()
        try:
            if tail:
                await resp.write(tail)
            await resp.write_eof()
        except ConnectionResetError:
            ex.disconnect = "streaming"
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
    request: web.Request,
    request_id: str,
    route: Route | None,
    group: RouteGroup,
    ex: Exchange,
    status: int,
    trusted: list[Network],
) -> None:
    """The one access-log line of this request: who, names, status, timings, token counts; no content."""
    backend = route.backend if route is not None else None
    access_log(
        {
            "request_id": request_id,
            "client": client_address(request.remote, request.headers.get("X-Forwarded-For"), trusted),
            "key": ex.key,
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
