"""The proxy engine carries out a plan: it asks a backend over HTTP.

For each upstream request of the plan the outbound codec builds the call, the engine sends it
(failing over between replicas while no connection was made), maps every transport fault to an
`UpstreamError` of the right class, and has the codec read the answer. Stop strings the gateway
enforces, tool calls it reads out of the text and token ids it fills in wrap each part; a
fanned-out plan's parts run concurrently and are put back together (gateway.proxy.fanout). The
engine never writes to the client; it returns when each upstream request started and ended, for
whoever observes the exchange.
"""

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from gateway import jsonutil
from gateway.adapters import tokenizer_for
from gateway.adapters.stops import StopStream, apply_stops
from gateway.adapters.token_ids import TokenIdStream, fill_token_ids
from gateway.adapters.tooluse import ToolStream
from gateway.codec.contract import EventStream, Outgoing, Reply, UpstreamCall
from gateway.neutral.errors import (
    GatewayError,
    InvalidRequest,
    Kind,
    UpstreamClass,
    UpstreamConnectError,
    UpstreamError,
    UpstreamTimeout,
    upstream_status_error,
)
from gateway.neutral.types import Answer, Request, Result
from gateway.proxy import fanout
from gateway.proxy.answers import READ_FAULTS, AnswerStream, malformed, too_large
from gateway.proxy.bodies import MAX_ERROR_BODY, MAX_INFO_BODY
from gateway.proxy.offload import OFFLOAD_BYTES, offload
from gateway.proxy.plan import NO_HEADERS, Plan, make_plan
from gateway.proxy.routing import Backend
from gateway.redact import REDACT
from gateway.upstream import Answer as Upstream
from gateway.upstream import BadAnswer, ConnectFailed, ConnectTimeout, Fault, Target, Unsendable, shown_url

if TYPE_CHECKING:  # imported only when tracing is on (gateway.app)
    from gateway.spans import ClientTrace
    from gateway.tracing import Tracing

log = logging.getLogger("gateway")
T = TypeVar("T")


class ProxyEngine:
    def __init__(self, backend: Backend, max_answer_bytes: int, tracing: "Tracing | None" = None) -> None:
        self.backend = backend
        # The most of one answer held at once: a whole body, or a stream's unfinished event.
        self._max_answer = max_answer_bytes
        self.codec = backend.outbound
        # Begins each upstream request's span; None with tracing off.
        self._trace = tracing.client(backend.name, backend.conf.dialect, backend.model) if tracing else None
        self._targets: dict[str, Target] = {}

    def plan(
        self, req: Request, request_id: str, body_bytes: int, max_fanout: int, headers: Mapping[str, str] = NO_HEADERS
    ) -> Plan:
        return make_plan(self.codec, self.backend.view, req, request_id, body_bytes, max_fanout, headers)

    def _target(self, base: str, path: str) -> Target:
        """Parsed once per replica and path: parsing a URL is a measurable part of a request."""
        key = base + path
        target = self._targets.get(key)
        if target is None:
            if len(self._targets) > 1024:  # paths carry model names; keep the cache bounded
                self._targets.clear()
            target = self._targets[key] = self.backend.target(base, path)
        return target

    async def _call(self, plan: Plan, part: Request) -> UpstreamCall:
        """The upstream call for one part. A large request may mean a long chat-template render
        or tokenizer run: off the event loop, so one big prompt does not stall the others."""
        if plan.body_bytes >= OFFLOAD_BYTES:
            return await offload(self.call, plan, part, True)
        return self.call(plan, part)

    def _build(self, out: Outgoing[Any], whole: bool = False) -> UpstreamCall:
        """The codec's call; with `whole`, its `meanwhile` work done as well (a large request's
        is too long to do on the event loop while the backend answers)."""
        try:
            call = self.codec.build(out)
            if whole and call.meanwhile is not None:
                call.meanwhile()
            return call
        except jsonutil.JSONEncodeError:
            # orjson reads what it cannot write (nesting past 254 levels); the body is the client's.
            raise InvalidRequest(
                "The request body nests too deeply or holds a number out of range", code="invalid_json"
            ) from None

    async def _send(
        self, call: UpstreamCall, request_id: str, configured: bool, trace: "ClientTrace | None" = None
    ) -> Upstream:
        """Send the call; an UpstreamError for any answer but a 2xx. `configured`: the model
        asked for is the one the backend's config names, so a 404 is the operator's mistake.
        `trace`: the request's span, whose context the backend gets and which sees each attempt."""
        b = self.backend
        conf = b.conf
        headers = self.headers(call, request_id)
        if trace is not None:
            trace.inject(headers)
        # A whole answer must be all there within timeout_s; a stream may run for long, but no
        # wait for its next piece may. Unset, the wait for the head is bounded by the same.
        first_byte = conf.first_byte_timeout_s
        pool = b.client()
        order = b.replicas()
        attempts = min(len(order), conf.retries + 1)
        failure: UpstreamError | None = None
        for n, i in enumerate(order[:attempts]):
            if n:
                if trace is not None:
                    trace.retry(n, order[n - 1], failure)
                await asyncio.sleep(conf.retry_backoff_s * 2 ** (n - 1) * random.uniform(0.5, 1.5))
            url = b.urls[i]
            target = self._target(url, call.path)
            try:
                sent = pool.request(
                    target,
                    call.method,
                    headers,
                    call.body,
                    connect_timeout=conf.connect_timeout_s,
                    timeout=conf.timeout_s,
                    gap=call.stream,
                    meanwhile=call.meanwhile,
                )
                resp = await (sent if first_byte is None else _within(first_byte, sent))
            except (ConnectFailed, ConnectTimeout) as e:
                # No connection, so not a byte of the request left: the next replica may take it.
                # A refused connection is no fluke: that replica is left out at once.
                log.warning("backend %s: cannot connect to replica %d (%s): %s", b.name, i, shown_url(url), e)
                b.health.failed(i, at_once=isinstance(e, ConnectFailed))
                failure = UpstreamConnectError(
                    f"backend {b.name!r} is unreachable ({type(e).__name__})", kind=Kind.UNAVAILABLE
                )
                continue
            except TimeoutError:
                b.health.failed(i)
                failure = UpstreamTimeout(f"backend {b.name!r} did not answer within {first_byte or conf.timeout_s:g}s")
                if conf.retry_on_timeout:
                    log.warning("backend %s: replica %d sent no answer in time; trying another", b.name, i)
                    continue
                raise failure from None
            except BadAnswer as e:
                # The backend answered in HTTP the client cannot read (a header line too long, too
                # many headers): it has the request, so it is not sent again. The parser's words
                # are for the log only; they may quote the answer.
                log.warning("backend %s: replica %d (%s) sent an unreadable answer: %s", b.name, i, shown_url(url), e)
                b.health.failed(i)
                raise UpstreamError(
                    f"backend {b.name!r} sent an answer whose head could not be read as HTTP",
                    upstream_class=UpstreamClass.PROTOCOL,
                ) from None
            except Unsendable as e:
                raise UpstreamError(f"backend {b.name!r}: the request cannot be sent: {e}") from None
            except Fault as e:
                # The request may have reached the backend (a reset after it was written): sent
                # again, it could start a second generation, so it is resent only where the
                # operator said that is harmless. The cause is for the log, not the client.
                log.warning("backend %s: request to replica %d (%s) failed: %s", b.name, i, shown_url(url), e)
                b.health.failed(i)
                failure = UpstreamConnectError(f"backend {b.name!r} failed: {type(e).__name__}")
                if conf.retry_on_timeout:
                    continue
                raise failure from None
            if trace is not None:
                trace.replied(i, n, call.method, target, resp.status)
            if resp.status < 300:
                b.health.succeeded(i)
                return resp
            err = await self._status_error(resp, call, configured)
            if resp.status >= 500:
                b.health.failed(i)
            else:
                b.health.succeeded(i)
            if resp.status in (429, 503) and n + 1 < attempts:
                # The replica turned the request away before generating anything: another may take it.
                log.warning("backend %s: replica %d answered %d; trying another", b.name, i, resp.status)
                failure = err
                continue
            raise err
        # No replica took the request: the service is down (MindIE, TGI, Triton, Databricks: 503).
        raise failure or UpstreamConnectError(f"backend {b.name!r} has no replicas", kind=Kind.UNAVAILABLE)

    async def _status_error(self, resp: Upstream, call: UpstreamCall, configured: bool) -> UpstreamError:
        """The error a non-2xx answer is; its body is read (up to a limit) and the response released."""
        b = self.backend
        try:
            body = await resp.prefix(MAX_ERROR_BODY)  # read for its message: a longer one is cut
        except Fault:
            body = b""
        finally:
            resp.release()
        message = self.codec.error_message(resp.status, body)
        if resp.status == 404 and configured:
            return UpstreamError(
                f"backend {b.name!r} does not serve the model {b.model!r} that the gateway's "
                f"configuration names for it (it answered 404: {message})",
                upstream_class=UpstreamClass.STATUS_4XX,
            )
        return upstream_status_error(
            resp.status,
            message,
            b.name,
            body if call.passthrough else None,
            resp.headers.get("Content-Type", "application/json"),
            resp.headers.get("Retry-After"),
        )

    async def fetch(self, path: str) -> Reply:
        """GET a path of the backend's own, for a dialect that relays what the backend says of
        itself. Every status comes back as it is; the body is the backend's, secrets scrubbed."""
        b = self.backend
        conf = b.conf
        for i in b.replicas():
            url = b.urls[i]
            try:
                resp = await b.client().request(
                    self._target(url, path),
                    "GET",
                    b.headers,
                    None,
                    connect_timeout=conf.connect_timeout_s,
                    timeout=conf.timeout_s,
                )
            except (ConnectFailed, ConnectTimeout) as e:
                log.warning("backend %s: cannot connect to %s: %s", b.name, shown_url(url), e)
                continue
            except Fault as e:
                raise UpstreamError(f"backend {b.name!r} failed: {type(e).__name__}") from None
            try:
                body = await resp.read(MAX_INFO_BODY)
            except Fault as e:
                raise UpstreamError(f"backend {b.name!r} failed: {type(e).__name__}") from None
            finally:
                resp.release()
            if body is None:
                raise UpstreamError(f"backend {b.name!r} answered {path} with more than {MAX_INFO_BODY} bytes")
            kind = resp.headers.get("Content-Type", "application/json")
            return Reply(resp.status, REDACT(body.decode("utf-8", "replace")).encode(), kind)
        raise UpstreamConnectError(f"backend {b.name!r} is unreachable", kind=Kind.UNAVAILABLE)

    # ---- whole answers -----------------------------------------------------------------------

    def complete(self, plan: Plan) -> Awaitable[Answer]:
        return fanout.complete_parts(plan, self._complete if self._trace is None else self._traced_complete)

    async def _traced_complete(self, plan: Plan, part: Request) -> Answer:
        assert self._trace is not None
        trace = self._trace.start(part)
        try:
            answer = await self._complete(plan, part, trace)
        except BaseException as e:
            trace.fail(e)
            raise
        trace.answered(answer)
        return answer

    async def _complete(self, plan: Plan, part: Request, trace: "ClientTrace | None" = None) -> Answer:
        call = await self._call(plan, part)
        times = plan.times
        span = times.started(time.perf_counter())
        try:
            resp = await self._send(call, plan.request_id, _configured(plan, part), trace)
            try:
                body = await resp.read(self._max_answer)
            except TimeoutError:
                raise UpstreamTimeout(
                    f"backend {self.backend.name!r} did not answer within {self.backend.conf.timeout_s:g}s"
                ) from None
            except Fault:
                raise UpstreamError(
                    f"backend {self.backend.name!r} closed the connection mid-response",
                    upstream_class=UpstreamClass.PROTOCOL,
                ) from None
            finally:
                resp.release()
        finally:
            times.ended(span, time.perf_counter())
        if body is None:
            raise too_large(self.backend, self._max_answer, "an answer", UpstreamClass.PROTOCOL)
        try:
            result = self.codec.parse_result(call, body, resp.headers)
        except GatewayError:
            raise
        except READ_FAULTS:
            raise malformed(self.backend, "response") from None
        if call.passthrough and result.passthrough is None:
            result = _with_body(result, body)
        if plan.stops and isinstance(result, Result):
            result = apply_stops(result, plan.stops, plan.include_stop)
        if plan.tools is not None and isinstance(result, Result):
            result = plan.tools.read(result)
        if plan.fill_token_ids and isinstance(result, Result):
            tok = tokenizer_for(plan.backend)
            texts = part.wants_token_details
            if len(body) >= OFFLOAD_BYTES:
                result = await offload(fill_token_ids, result, tok, texts)
            else:
                result = fill_token_ids(result, tok, texts)
        return result

    # ---- streams -----------------------------------------------------------------------------

    async def open_stream(self, plan: Plan) -> EventStream:
        return await fanout.open_parts(plan, self._open if self._trace is None else self._traced_open)

    async def _traced_open(self, plan: Plan, part: Request) -> EventStream:
        assert self._trace is not None
        trace = self._trace.start(part)
        try:
            stream = await self._open(plan, part, trace)
        except BaseException as e:
            trace.fail(e)
            raise
        return trace.watch(stream)  # the span ends when the stream is closed

    async def _open(self, plan: Plan, part: Request, trace: "ClientTrace | None" = None) -> EventStream:
        call = await self._call(plan, part)
        times = plan.times
        span = times.started(time.perf_counter())
        try:
            resp = await self._send(call, plan.request_id, _configured(plan, part), trace)
        except BaseException:
            times.ended(span, time.perf_counter())
            raise
        stream: EventStream = AnswerStream(
            self.backend, resp, self.codec.stream_parser(call), times, span, self._max_answer
        )
        if plan.stops:
            # Ending early closes the proxy stream, which cuts the connection and so the generation.
            stream = StopStream(stream, plan.stops, plan.include_stop, n=part.params.choices)
        if plan.tools is not None:
            stream = ToolStream(stream, plan.tools)
        if plan.fill_token_ids:
            stream = TokenIdStream(stream, tokenizer_for(plan.backend))
        return stream

    # ---- what each upstream request is, before it is sent -------------------------------------

    def call(self, plan: Plan, part: Request, whole: bool = False) -> UpstreamCall:
        """The upstream call for one part of the plan, as it is sent (`whole`: see `_build`)."""
        out = Outgoing(part, plan.backend, plan.request_id, plan.same_wire, plan.variant)
        call = self._build(out, whole)
        if plan.headers:
            # The Inference Extension's headers go on as the client sent them (the codec's own win).
            call = replace(call, headers={**plan.headers, **(call.headers or {})})
        return call

    def headers(self, call: UpstreamCall, request_id: str) -> dict[str, str]:
        """The headers the gateway sends `call` with; a trace's context is added to them when
        tracing is on, and the connection adds Host, Content-Length and any URL credentials.
        No client header reaches a backend but the request id and the Inference Extension's
        (plan.POOL_HEADERS, in call.headers): credentials belong to each side, and MindIE
        steers its scheduler by headers (req-id, req-type, d-target, is-recompute)."""
        headers = {**self.backend.headers, **(call.headers or {}), "X-Request-Id": request_id}
        if call.body is not None:
            headers.setdefault("Content-Type", "application/json")
        return headers


async def _within(seconds: float, aw: Awaitable[T]) -> T:
    async with asyncio.timeout(seconds):
        return await aw


def _configured(plan: Plan, part: Request) -> bool:
    """Whether the backend is asked for exactly what its config names: its model, and no
    version or other path value the client chose."""
    return plan.backend.model is not None and not part.path_params


def _with_body(result: Answer, body: bytes) -> Answer:
    """The answer, with the upstream body the client may take as it is."""
    return replace(result, passthrough=body)
