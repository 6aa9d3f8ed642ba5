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
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from gateway.codec.capabilities import Keeps, Pings, at_end, has, key_headers
from gateway.codec.contract import Caller, Endpoint, Inbound, RenderContext, Reply
from gateway.httpout import StreamAnswer, WholeAnswer
from gateway.neutral.errors import GatewayError, Unavailable, UpstreamError, UpstreamTimeout
from gateway.neutral.types import Request
from gateway.proxy import observe
from gateway.proxy.admission import Ticket, priority_of
from gateway.proxy.intake import check_auth, read_body
from gateway.proxy.observe import Exchange
from gateway.proxy.peers import Arrival
from gateway.proxy.plan import DROPPED_HEADER, Plan, pool_headers
from gateway.proxy.relay import Paced, fault_tail, relay, rendered
from gateway.proxy.routing import Route, RouteGroup
from gateway.proxy.services import SERVICES, Services

if TYPE_CHECKING:  # imported only when tracing is on (gateway.app)
    from gateway.spans import ServerTrace

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


class Held:
    """What a request holds (its slot, its gauges, its record), each part let go once it is
    taken, in the reverse order, however the request ends: an ExitStack's work at a fraction of
    its cost (it wraps each callback in a closure of its own). A part that fails to let go is
    logged, and the others are let go all the same."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[tuple[Callable[..., object], tuple[Any, ...]]] = []

    def callback(self, let_go: Callable[..., object], *args: Any) -> None:
        self._parts.append((let_go, args))

    def release(self) -> None:
        parts, self._parts = self._parts, []
        while parts:
            let_go, args = parts.pop()
            try:
                let_go(*args)
            except Exception:
                log.exception("letting go of what a request held failed")


def request_id_of(request: web.Request) -> str:
    """The client's X-Request-Id when it is a plain token, else a fresh one."""
    given = request.headers.get(REQUEST_ID)
    return given if given is not None and _CLIENT_ID.match(given) else _IDS.new()


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


def reply_response(reply: Reply) -> WholeAnswer:
    if reply.body is None:
        return WholeAnswer(b"", status=reply.status)
    return WholeAnswer(reply.body, status=reply.status, headers={"Content-Type": reply.content_type})


def arrival_of(request: web.Request) -> Arrival:
    """What the layers below are told of how the request came."""
    return Arrival(request_id_of(request), request.method, request.path, request.headers, request.remote)


async def serve(request: web.Request, ep: Endpoint, group: RouteGroup, inbound: Inbound) -> web.StreamResponse:
    """The HTTP edge of an inference request: what it holds (its body's room and its slot, a
    place at its backend, the gauges it counts in, its trace) is let go by the stack, each part
    once taken, however the request ends; its error, before the answer's head went out, is
    rendered in the client's dialect."""
    svc = request.app[SERVICES]
    arrival = arrival_of(request)
    ex = Exchange(time.perf_counter(), arrival.request_id)
    ticket = Ticket()
    trace = None
    if svc.tracing is not None:
        resource = request.match_info.route.resource
        pattern = resource.canonical if resource is not None else request.path
        trace = svc.tracing.server(
            request.method, pattern, request.path, request.scheme, request.headers, ex.request_id, group.dialect
        )
    held = Held()
    held.callback(_finished, svc, arrival, group, ex, trace)
    held.callback(svc.budget.release, ticket)
    try:
        try:
            ex.key = check_auth(request, svc.api_keys, key_headers(inbound))
            # The body's room is taken before it is read, so a flood of slow or unfinished bodies
            # meets the body budget, not the memory; the slot only once the body is whole, so a
            # slow body holds no slot a request ready to go could use.
            body = await read_body(request, arrival, svc.limits, svc.budget, ticket, svc.trusted_proxies)
            ex.body_read = True
            svc.budget.take_slots(ticket, 1)
            return await _answer(request, arrival, ep, group, body, svc, ex, ticket, held, trace)
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
            if not ex.body_read:
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
        held.release()


def _finished(svc: Services, arrival: Arrival, group: RouteGroup, ex: Exchange, trace: "ServerTrace | None") -> None:
    """The request's record, once all it held is let go."""
    if ex.disconnect:
        ex.status = 499
    observe.finish(svc.metrics, arrival, group, ex, svc.trusted_proxies if svc.access_log else None)
    if trace is not None:
        trace.end(ex)


async def _answer(
    request: web.Request,
    arrival: Arrival,
    ep: Endpoint,
    group: RouteGroup,
    body: bytes,
    svc: Services,
    ex: Exchange,
    ticket: Ticket,
    held: Held,
    trace: "ServerTrace | None",
) -> web.StreamResponse:
    """The request, its body read: parsed, routed, planned, admitted and carried out."""
    path = request.match_info
    req = ep.parse(body, path)
    caller = Caller(ex.request_id, ex.key or "", svc.store)
    if ep.prepare is not None:
        req = await ep.prepare(req, caller)
    ex.route = route = group.route(ep.path_model(path) if ep.path_model else req.model)
    backend = route.backend
    if trace is not None:
        trace.request(req, route.name, backend.name, backend.conf.dialect, backend.model)
    plan = route.engine.plan(req, ex.request_id, len(body), svc.limits.max_fanout, pool_headers(arrival.headers))
    svc.budget.take_slots(ticket, plan.width - 1)
    when = deadline(backend.conf.max_duration_s, req.params.timeout, ex.start)
    running = plan.width
    if backend.gate is not None:
        # Waiting for the backend's own slot counts against the request's deadline.
        running = await within(when, backend.gate.enter(plan.width, priority_of(arrival.headers, req, svc.objectives)))
        held.callback(backend.gate.leave, running)
    if backend.load is not None:
        # Pool-member mode: the backend's running-requests gauge.
        backend.load.running.inc(running)
        held.callback(backend.load.running.dec, running)
    if svc.metrics.enabled:
        ex.metrics = svc.metrics.route(route.name, backend.name)
        ex.metrics.started()
        held.callback(ex.metrics.ended)
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
    ex.tools = plan.tools
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
    headers = {"Content-Type": ep.content_type, REQUEST_ID: ex.request_id}
    if ep.headers is not None:
        headers.update(ep.headers(result, ctx))
    if plan.dropped:
        headers[DROPPED_HEADER] = ",".join(plan.dropped)
    ex.status = 200
    return WholeAnswer(out, headers=headers)


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
        if has(renderer, Pings):
            assert task is not None  # a request's handler runs in a task
            stream = Paced(stream, renderer.ping_every_s, task)
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
        if first and at_end(stream):
            # The backend's whole answer came in its first read (a short answer, a fast server):
            # the client's goes out whole too, its head and body in one write.
            body, whole = await rendered(stream, renderer, first, ex)
            if whole and has(renderer, Keeps):
                await renderer.keep(caller)
            answer = WholeAnswer(body, headers=headers)
            if svc.drain.closing:
                answer.force_close()
            return answer
        resp = StreamAnswer(status=200, headers=headers)
        if svc.drain.closing:
            resp.force_close()
        await resp.prepare(request)  # the head waits to go out with the first events
        if task is not None:
            svc.drain.streams.add(task)
        try:
            tail = await within(when, relay(resp, stream, renderer, first, ex))
            tail += renderer.end()
            if has(renderer, Keeps):
                await renderer.keep(caller)
        except ConnectionResetError:
            # A write found the client gone: normal, and the upstream closes on the way out.
            ex.disconnect = "streaming" if ex.first_token else "before_first_token"
            return resp
        except GatewayError as e:
            tail = fault_tail(renderer, e, ex)
        except asyncio.CancelledError:
            if not svc.drain.ending or task is None:
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
            await resp.write_eof(tail)  # with the stream's end: one write, not two
        except ConnectionResetError:
            ex.disconnect = "streaming"
        return resp
    finally:
        if task is not None:
            svc.drain.streams.discard(task)
        await stream.aclose()
