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
from typing import TYPE_CHECKING, Any

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
    Overloaded,
    UpstreamClass,
    UpstreamConnectError,
    UpstreamError,
    upstream_status_error,
)
from gateway.neutral.types import Answer, Request, Result
from gateway.proxy import fanout
from gateway.proxy.answers import READ_FAULTS, AnswerStream, fault_error, logged, malformed, over_budget, too_large
from gateway.proxy.bodies import MAX_ERROR_BODY, MAX_INFO_BODY
from gateway.proxy.offload import OFFLOAD_BYTES, offload
from gateway.proxy.plan import NO_HEADERS, Plan, make_plan
from gateway.proxy.routing import Backend
from gateway.redact import REDACT
from gateway.upstream import Answer as Upstream
from gateway.upstream import (
    AnswerBudget,
    Broken,
    ConnectFailed,
    ConnectTimeout,
    Fault,
    OverBudget,
    PoolBusy,
    ReadTimeout,
    Target,
    Unsendable,
    shown_url,
)

if TYPE_CHECKING:  # imported only when tracing is on (gateway.app)
    from gateway.spans import ClientTrace
    from gateway.tracing import Tracing

log = logging.getLogger("gateway")


class ProxyEngine:
    def __init__(
        self, backend: Backend, max_answer_bytes: int, answers: AnswerBudget, tracing: "Tracing | None" = None
    ) -> None:
        self.backend = backend
        # The most of one answer held at once: a whole body, or a stream's unfinished event;
        # and what all answers of the process may hold together.
        self._max_answer = max_answer_bytes
        self._answers = answers
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
    ) -> tuple[Upstream, int]:
        """Send the call; the answer (a 2xx) and the replica it came from, or an UpstreamError.
        `configured`: the model asked for is the one the backend's config names, so a 404 is
        the operator's mistake. `trace`: the request's span, whose context the backend gets and
        which sees each attempt."""
        b = self.backend
        conf = b.conf
        headers = self.headers(call, request_id)
        if trace is not None:
            trace.inject(headers)
        pool = b.client()
        order = b.replicas()
        attempts = min(len(order), conf.retries + 1)
        failure: UpstreamError | None = None
        try:
            for n, i in enumerate(order[:attempts]):
                if n:
                    if trace is not None:
                        trace.retry(n, order[n - 1], failure)
                    await asyncio.sleep(conf.retry_backoff_s * 2 ** (n - 1) * random.uniform(0.5, 1.5))
                url = b.urls[i]
                target = self._target(url, call.path)
                try:
                    # A whole answer must be all there within timeout_s; a stream may run for
                    # long, but no wait for its next piece may. Either's head must come within
                    # first_byte_timeout_s as well, when that is set.
                    resp = await pool.request(
                        target,
                        call.method,
                        headers,
                        call.body,
                        connect_timeout=conf.connect_timeout_s,
                        timeout=conf.timeout_s,
                        head_timeout=conf.first_byte_timeout_s,
                        gap=call.stream,
                        meanwhile=call.meanwhile,
                    )
                except Fault as e:
                    failure = self._head_fault(e, i, call.stream)
                    # Before a connection nothing was sent: another replica may take it. After, it
                    # is sent again only where the operator said a second generation is harmless.
                    if isinstance(e, (ConnectFailed, ConnectTimeout)) or (
                        conf.retry_on_timeout and isinstance(e, (ReadTimeout, Broken))
                    ):
                        continue
                    raise failure from None
                if trace is not None:
                    trace.replied(i, n, call.method, target, resp.status)
                if resp.status < 300:
                    b.health.succeeded(i)
                    return resp, i
                failure = await self._status_error(resp, call, configured)
                if resp.status >= 500:
                    b.health.failed(i)
                else:
                    b.health.succeeded(i)
                if resp.status in (429, 503) and n + 1 < attempts:
                    # The replica turned the request away before generating anything: another may take it.
                    log.warning("backend %s: replica %d answered %d; trying another", b.name, i, resp.status)
                    continue
                raise failure
            # No replica took the request: the service is down (MindIE, TGI, Triton, Databricks: 503).
            raise failure or UpstreamConnectError(f"backend {b.name!r} has no replicas", kind=Kind.UNAVAILABLE)
        finally:
            # The error raised from here has this frame in its traceback: held here as well, the
            # two would keep each other (and the request's body) until the collector came by.
            failure = None

    def _head_fault(self, e: Fault, i: int, stream: bool) -> UpstreamError:
        """The error a fault before the answer's head is, logged once with its cause, and what it
        says of the replica; Overloaded, raised, when the gateway's own connections ran out."""
        b = self.backend
        conf = b.conf
        if isinstance(e, PoolBusy):
            # The gateway's own limit: no replica is to blame, and another would wait as long.
            log.warning("backend %s %s (max_connections); the request is turned away", b.name, e)
            raise Overloaded(f"The gateway has no connection to backend {b.name!r} free; retry later") from None
        if isinstance(e, (ConnectFailed, ConnectTimeout)):
            # A refused connection is no fluke: that replica is left out at once.
            log.warning("backend %s: cannot connect to replica %d (%s): %s", b.name, i, shown_url(b.urls[i]), e)
            b.health.failed(i, at_once=isinstance(e, ConnectFailed))
            return UpstreamConnectError(
                f"backend {b.name!r} is unreachable ({type(e).__name__})", kind=Kind.UNAVAILABLE
            )
        if isinstance(e, Unsendable):
            err: UpstreamError = UpstreamError(f"backend {b.name!r} cannot be sent this request: {e}")
        else:
            b.health.failed(i)
            head_s = conf.first_byte_timeout_s or conf.timeout_s
            within = head_s if stream else min(head_s, conf.timeout_s)
            err = fault_error(b, e, f"did not answer within {within:g}s")
        return logged(b, i, err, e)

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
            try:
                got = await b.get(
                    b.urls[i], path, limit=MAX_INFO_BODY, within=conf.timeout_s, connect_s=conf.connect_timeout_s
                )
            except Fault as e:
                if isinstance(e, (ConnectFailed, ConnectTimeout)):
                    self._head_fault(e, i, False)
                    continue
                raise self._head_fault(e, i, False) from None
            if got.body is None:
                raise UpstreamError(f"backend {b.name!r} answered {path} with more than {MAX_INFO_BODY} bytes")
            return Reply(got.status, REDACT(got.body.decode("utf-8", "replace")).encode(), got.content_type)
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
            resp, replica = await self._send(call, plan.request_id, _configured(plan, part), trace)
            try:
                body = await resp.read(self._max_answer, self._answers)
            except Fault as e:
                timed_out = f"did not finish its answer within {self.backend.conf.timeout_s:g}s"
                raise logged(self.backend, replica, fault_error(self.backend, e, timed_out), e) from None
            except OverBudget:
                raise logged(
                    self.backend, replica, over_budget(self.backend, self._answers, UpstreamClass.PROTOCOL)
                ) from None
            finally:
                resp.release()
        finally:
            times.ended(span, time.perf_counter())
        if body is None:
            raise logged(
                self.backend, replica, too_large(self.backend, self._max_answer, "an answer", UpstreamClass.PROTOCOL)
            )
        try:
            result = self.codec.parse_result(call, body, resp.headers)
        except GatewayError:
            raise
        except READ_FAULTS as e:
            raise logged(self.backend, replica, malformed(self.backend, "response"), e) from None
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
            resp, replica = await self._send(call, plan.request_id, _configured(plan, part), trace)
        except BaseException:
            times.ended(span, time.perf_counter())
            raise
        stream: EventStream = AnswerStream(
            self.backend, replica, resp, self.codec.stream_parser(call), times, span, self._max_answer, self._answers
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


def _configured(plan: Plan, part: Request) -> bool:
    """Whether the backend is asked for exactly what its config names: its model, and no
    version or other path value the client chose."""
    return plan.backend.model is not None and not part.path_params


def _with_body(result: Answer, body: bytes) -> Answer:
    """The answer, with the upstream body the client may take as it is."""
    return replace(result, passthrough=body)
