"""The exchange handler: one client request from body to last byte, for every inbound dialect.

It reads and parses the body with the endpoint's codec, picks the route, makes the request's
plan, asks the route's engine to carry it out, and renders the answer (whole or streamed) in the
client's dialect. Errors before the response headers become a proper status and error body;
after them, an in-band error event and the stream's terminator. A client that goes away cancels
this task (the server runs with handler cancellation), which closes the upstream connection on
the way out.
"""

import asyncio
import itertools
import logging
import os
import re
import time
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from aiohttp import web

from gateway.codec.contract import (
    Caller,
    Endpoint,
    EventStream,
    Inbound,
    Keeps,
    Pings,
    RenderContext,
    Reply,
    StateStore,
    StreamRenderer,
    key_headers,
)
from gateway.config import Limits
from gateway.metrics import Metrics
from gateway.modelserver import BackendLoad
from gateway.neutral.errors import GatewayError, Unavailable, UpstreamError, UpstreamTimeout
from gateway.neutral.events import Event
from gateway.neutral.types import Request
from gateway.proxy import observe
from gateway.proxy.admission import Budget, Gate, Ticket, priority_of
from gateway.proxy.intake import check_auth, read_body
from gateway.proxy.observe import Exchange
from gateway.proxy.peers import Network, key_id
from gateway.proxy.plan import DROPPED_HEADER, Plan, pool_headers
from gateway.proxy.routing import Route, RouteGroup
from gateway.proxy.state import MemoryStore, StoreLimits

if TYPE_CHECKING:  # imported only when tracing is on (gateway.app)
    from gateway.spans import ServerTrace
    from gateway.tracing import Tracing

log = logging.getLogger("gateway")
T = TypeVar("T")
REQUEST_ID = "X-Request-Id"
# A client's request id is echoed, logged and forwarded, so only a plain token is taken as is.
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class _Ids:
    """Fresh request ids: 32 hex digits, a random half per process and a count, so that minting
    one asks the OS for nothing (a forked worker draws its own half)."""

    def __init__(self) -> None:
        self.reseed()
        os.register_at_fork(after_in_child=self.reseed)

    def reseed(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._count = itertools.count()

    def new(self) -> str:
        return f"{self._prefix}{next(self._count):016x}"


_IDS = _Ids()


def request_id_of(request: web.Request) -> str:
    """The client's X-Request-Id when it is a plain token, else a fresh one."""
    given = request.headers.get(REQUEST_ID)
    return given if given is not None and _CLIENT_ID.match(given) else _IDS.new()


@dataclass(eq=False)
class Services:
    """What every handler needs from the app; stored under one AppKey."""

    metrics: Metrics
    # API key -> the name the access log gives it; None when auth is off.
    api_keys: dict[str, str] | None
    limits: Limits
    budget: Budget
    trusted_proxies: list[Network] = field(default_factory=list)
    # InferenceObjective name -> its priority (config: inference_objectives).
    objectives: dict[str, int] = field(default_factory=dict)
    access_log: bool = True  # off for the gateway's in-process simulated backends
    # Streams being written, so that a shutdown past its grace period can end each one the
    # dialect's way (an in-band error and the terminator) instead of cutting its socket.
    streams: set["asyncio.Task[object]"] = field(default_factory=set)
    ending: bool = False
    # The gateway is draining: answers say `Connection: close` (a stream's, before it starts).
    closing: bool = False
    tracing: "Tracing | None" = None  # None: tracing is off
    # What stateful inbound APIs keep (the Responses API's stored responses).
    store: StateStore = field(default_factory=lambda: MemoryStore(StoreLimits(10_000, 256 * 1024 * 1024)))

    def end_streams(self) -> int:
        """End every stream still being written; how many there were."""
        self.ending = True
        for task in list(self.streams):
            task.cancel()
        return len(self.streams)

    @classmethod
    def of(cls, metrics: Metrics, limits: Limits, api_keys: Iterable[str] | None = None) -> "Services":
        return cls(
            metrics=metrics,
            api_keys=None if api_keys is None else {k: key_id(k) for k in api_keys},
            limits=limits,
            budget=Budget(
                limits.max_concurrent_requests, limits.max_buffered_body_bytes, limits.max_unfinished_bodies_per_client
            ),
        )


SERVICES = web.AppKey("services", Services)


def deadline(max_duration_s: float | None, client_s: int | None, arrived: float) -> float | None:
    """When the request must be done by (the event loop's clock), from the backend's
    max_duration_s and a deadline the client gave (MindIE's `timeout`); None for no deadline."""
    limits = [s for s in (max_duration_s, client_s) if s]
    if not limits:
        return None
    return asyncio.get_running_loop().time() + min(limits) - (time.perf_counter() - arrived)


async def within(when: float | None, aw: Awaitable[T]) -> T:
    """`aw`, unless the request's deadline passes first: then the client's 504."""
    if when is None:
        return await aw
    try:
        async with asyncio.timeout_at(when):
            return await aw
    except TimeoutError:
        raise UpstreamTimeout("the request did not finish within its time limit") from None


def reply_response(reply: Reply) -> web.Response:
    if reply.body is None:
        return web.Response(status=reply.status)
    # Set as a header: a relayed backend type may carry parameters ("; charset=utf-8").
    return web.Response(status=reply.status, body=reply.body, headers={"Content-Type": reply.content_type})


async def serve(request: web.Request, ep: Endpoint, group: RouteGroup, inbound: Inbound) -> web.StreamResponse:
    svc = request.app[SERVICES]
    ex = Exchange(time.perf_counter(), request_id_of(request))
    ticket = Ticket()
    body_read = False
    gate: Gate | None = None
    held = 0
    load: BackendLoad | None = None  # pool-member mode: the backend's running-requests gauge
    running = 0
    trace = svc.tracing.server(request, ex.request_id, group.dialect) if svc.tracing is not None else None
    try:
        ex.key = check_auth(request, svc.api_keys, key_headers(inbound))
        # The body's room is taken before it is read, so a flood of slow or unfinished bodies meets
        # the body budget, not the memory; the slot only once the body is whole, so a slow body
        # holds no slot a request ready to go could use.
        body = await read_body(request, svc.limits, svc.budget, ticket, svc.trusted_proxies)
        body_read = True
        svc.budget.take_slots(ticket, 1)
        path = request.match_info
        req = ep.parse(body, path)
        caller = Caller(ex.request_id, ex.key or "", svc.store)
        if ep.prepare is not None:
            req = await ep.prepare(req, caller)
        ex.route = route = group.route(ep.path_model(path) if ep.path_model else req.model)
        backend = route.backend
        if trace is not None:
            trace.request(req, route.name, backend.name, backend.conf.dialect, backend.model)
        plan = route.engine.plan(req, ex.request_id, len(body), svc.limits.max_fanout, pool_headers(request.headers))
        svc.budget.take_slots(ticket, plan.width - 1)
        when = deadline(backend.conf.max_duration_s, req.params.timeout, ex.start)
        if backend.gate is not None:
            # Waiting for the backend's own slot counts against the request's deadline.
            held = await within(when, backend.gate.enter(plan.width, priority_of(request, req, svc.objectives)))
            gate = backend.gate
        if backend.load is not None:
            load, running = backend.load, held or plan.width
            load.running.inc(running)
        if svc.metrics.enabled:
            ex.metrics = svc.metrics.route(route.name, backend.name)
            ex.metrics.started()  # and `ended` below, for the requests that got this far
        ctx = RenderContext(
            request_id=ex.request_id,
            created=int(time.time()),
            model=req.model or backend.model or route.name,
            passthrough=plan.passthrough,
            started=ex.start,
            backend_model=backend.model,
            finish_in_band=plan.finish_in_band,
        )
        ex.upstream = plan.times
        if req.stream and ep.stream_renderer is not None:
            resp = await _stream(request, ep, route, req, plan, ctx, ex, when, trace, caller)
            ex.status = resp.status
            return resp
        result = await within(when, route.engine.complete(plan))
        if trace is not None:
            trace.saw_answer(result)
        out = result.passthrough if result.passthrough is not None else ep.render_result(result, req, ctx)
        ex.counted(result.usage)
        if ep.keep is not None:
            await ep.keep(req, result, ctx, caller)
        # The type as a header, not `content_type=`: aiohttp would parse it again.
        headers = {"Content-Type": ep.content_type, REQUEST_ID: ex.request_id}
        if ep.headers is not None:
            headers.update(ep.headers(result, ctx))
        if plan.dropped:
            headers[DROPPED_HEADER] = ",".join(plan.dropped)
        ex.status = 200
        return web.Response(body=out, headers=headers)
    except GatewayError as e:
        if isinstance(e, UpstreamError):
            ex.upstream_error = e.upstream_class.value
            log.debug("request %s: upstream error (%s): %s", ex.request_id, ex.upstream_error, e)
        # A backend's own error body goes as it is to a client of its wire.
        reply = Reply(e.status, e.body, e.body_type) if e.body is not None else inbound.error_reply(e)
        resp = reply_response(reply)
        resp.headers[REQUEST_ID] = ex.request_id
        if e.retry_after is not None and resp.status in (429, 503):
            resp.headers["Retry-After"] = e.retry_after
        if not body_read:
            # Refused before its body was read (too large, too slow, undecodable, over a limit):
            # the connection closes rather than wait for the rest of a body no one will read.
            resp.force_close()
        ex.status = resp.status
        return resp
    except asyncio.CancelledError:
        # The server noticed the client left: the task is cancelled, which closes the upstream.
        ex.disconnect = "streaming" if ex.first_token else "before_first_token"
        raise
    finally:
        if gate is not None:
            gate.leave(held)
        if load is not None:
            load.running.dec(running)
        svc.budget.release(ticket)
        if ex.metrics is not None:
            ex.metrics.ended()
        if ex.disconnect:
            ex.status = 499
        observe.finish(svc.metrics, request, group, ex, svc.trusted_proxies if svc.access_log else None)
        if trace is not None:
            trace.end(ex)


# What a paced stream's next read is when the backend said nothing for a while.
SILENCE: list[Event] = []


class _Paced:
    """A stream read with a limit on silence, for a renderer that `Pings`: `next` gives SILENCE
    when the backend said nothing for `every` seconds, and the read goes on waiting."""

    __slots__ = ("_every", "_pending", "_stream")

    def __init__(self, stream: EventStream, every: float) -> None:
        self._stream = stream
        self._every = every
        self._pending: asyncio.Future[list[Event] | None] | None = None

    async def next(self) -> list[Event] | None:
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._stream.next())
        done, _ = await asyncio.wait((self._pending,), timeout=self._every)
        if not done:
            return SILENCE
        read, self._pending = self._pending, None
        return read.result()

    async def aclose(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        await self._stream.aclose()


async def _relay(
    resp: web.StreamResponse, stream: EventStream, renderer: StreamRenderer, first: list[Event] | None, ex: Exchange
) -> None:
    """The stream's events, rendered and written as they come, up to its end (with a ping in
    each silence, for a renderer that pings)."""
    out = renderer.start()
    if first is SILENCE:
        assert isinstance(renderer, Pings)
        out += renderer.ping()
    elif first:
        ex.observe(first)
        out += renderer.render(first)
    if out:
        await resp.write(out)
    if first is not None:
        while (events := await stream.next()) is not None:
            if events is SILENCE:
                assert isinstance(renderer, Pings)
                await resp.write(renderer.ping())
                continue
            ex.observe(events)
            out = renderer.render(events)
            if out:
                await resp.write(out)


async def _stream(
    request: web.Request,
    ep: Endpoint,
    route: Route,
    req: Request,
    plan: Plan,
    ctx: RenderContext,
    ex: Exchange,
    when: float | None,
    trace: "ServerTrace | None",
    caller: Caller,
) -> web.StreamResponse:
    assert ep.stream_renderer is not None
    svc = request.app[SERVICES]
    stream = await within(when, route.engine.open_stream(plan))
    if trace is not None:
        stream = trace.watch(stream)
    task = asyncio.current_task()
    try:
        renderer = ep.stream_renderer(req, ctx)
        if isinstance(renderer, Pings):
            stream = _Paced(stream, renderer.ping_every_s)
        # Wait for the first events before sending headers: a backend that fails at once
        # still gets the client a real error status instead of a 200 with an error inside
        # (unless it is silent for longer than a pinging renderer's clients wait).
        first = await within(when, stream.next())
        headers = {
            "Content-Type": renderer.content_type,
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            REQUEST_ID: ctx.request_id,
        }
        if ep.headers is not None:
            headers.update(ep.headers(None, ctx))
        if plan.dropped:
            headers[DROPPED_HEADER] = ",".join(plan.dropped)
        resp = web.StreamResponse(status=200, headers=headers)
        if svc.closing:
            resp.force_close()
        try:
            await resp.prepare(request)
        except ConnectionResetError:
            ex.disconnect = "before_first_token"
            return resp
        if task is not None:
            svc.streams.add(task)
        try:
            await within(when, _relay(resp, stream, renderer, first, ex))
            tail = renderer.end()
            if isinstance(renderer, Keeps):
                await renderer.keep(caller)
        except ConnectionResetError:
            # A write found the client gone: normal, and the upstream closes on the way out.
            ex.disconnect = "streaming" if ex.first_token else "before_first_token"
            return resp
        except GatewayError as e:
            if isinstance(e, UpstreamError):
                ex.upstream_error = e.upstream_class.value
            tail = renderer.error(e) + renderer.end()
        except asyncio.CancelledError:
            if not svc.ending or task is None:
                raise  # the client left
            # The gateway is stopping and the grace period is over: the stream ends its
            # dialect's way, and the upstream is closed on the way out.
            task.uncancel()
            tail = renderer.error(Unavailable("the gateway is shutting down")) + renderer.end()
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
        if task is not None:
            svc.streams.discard(task)
        await stream.aclose()
