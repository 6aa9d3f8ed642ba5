"""OpenTelemetry traces: a SERVER span per client request, a CLIENT span per upstream request.

Off unless the config has `tracing:`. Then `create_app` imports this module (the SDK takes about
a tenth of a second and a few MiB to import, which a gateway without tracing never pays), makes
one `Tracing` per app, and hands it to the exchange handler and the engines; with tracing off
they hold None and check only that.

The server span is the current span while its request is handled, so each upstream request's
client span (each fan-out branch its own) is its child, and the client's `traceparent` (W3C
trace context) is its parent. Each upstream request carries its client span's `traceparent` and
the client's `tracestate`; no other client header is forwarded. A client span covers its
upstream request with every failover attempt: a retry is an event on it, not a span of its own.

Attributes follow OpenTelemetry's GenAI conventions (`gen_ai.operation.name`, `gen_ai.request.*`,
`gen_ai.usage.*`, `gen_ai.response.finish_reasons`; the first token is an event), with a few
HTTP and `gateway.*` ones; the README (Operations, Tracing) lists them. Spans hold names, numbers
and finish reasons only: never a prompt, a completion, a stop string or an error's text.

Ending a span only queues it: the SDK's batch processor exports from a thread of its own, so the
event loop never waits for the collector (a full queue drops spans). Unsampled requests get
non-recording spans, which only carry the trace context on.
"""

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

import aiohttp
from aiohttp import web
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue
from yarl import URL

from gateway import __version__
from gateway.codec.contract import EventStream
from gateway.neutral.errors import GatewayError, UpstreamError
from gateway.neutral.events import TOKENS, Event, FinishEvent, UsageEvent
from gateway.neutral.finish import OPENAI
from gateway.neutral.types import Answer, Finish, Request, Result, Task, Usage

log = logging.getLogger("gateway")
Attributes = dict[str, AttributeValue]
# The longest one export may take, and the longest an app's stop waits for its last spans.
EXPORT_TIMEOUT_S = 5.0
FLUSH_S = 3.0  # within what a worker's parent allows beyond the grace period (gateway.workers)
FIRST_TOKEN = "gen_ai.first_token"
RETRY = "gateway.retry"
OPERATIONS = {Task.CHAT: "chat", Task.COMPLETION: "text_completion", Task.EMBEDDING: "embeddings"}
# OpenAI's words, the ones GenAI tools know; an abnormal end says so.
FINISH_REASONS: dict[Finish, str] = {
    **OPENAI,
    Finish.ABORT: "abort",
    Finish.ERROR: "error",
    Finish.UNKNOWN: "unknown",
}
# Sampling parameters recorded as they were asked for: numbers only.
_PARAMS = (
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
    ("top_k", "gen_ai.request.top_k"),
    ("seed", "gen_ai.request.seed"),
    ("frequency_penalty", "gen_ai.request.frequency_penalty"),
    ("presence_penalty", "gen_ai.request.presence_penalty"),
)
_PROPAGATOR = TraceContextTextMapPropagator()


class Tracing:
    """One app's tracer. Its provider and exporter are made when the app starts (`start`) and
    flushed and shut down when it stops (`stop`); each worker process has its own."""

    def __init__(self, endpoint: str, sample_ratio: float, service_name: str) -> None:
        self.endpoint = endpoint
        self.shown = str(URL(endpoint).with_user(None))  # for logs: no user:password
        self.sample_ratio = sample_ratio
        self.service_name = service_name
        self._provider: TracerProvider | None = None
        self.tracer: trace.Tracer = trace.NoOpTracer()

    def start(self) -> None:
        provider = TracerProvider(
            # A client's sampling decision (its traceparent's flag) is kept; a trace that begins
            # here is sampled at the ratio.
            sampler=ParentBased(TraceIdRatioBased(self.sample_ratio)),
            resource=Resource.create(
                {"service.name": self.service_name, "service.version": __version__, "process.pid": os.getpid()}
            ),
            # `stop` does it; an exit hook would also keep every reloaded app's provider alive.
            shutdown_on_exit=False,
        )
        exporter = OTLPSpanExporter(endpoint=self.endpoint, timeout=EXPORT_TIMEOUT_S)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        self._provider = provider
        self.tracer = provider.get_tracer("gateway", __version__)

    async def stop(self) -> None:
        """Export the spans still queued and shut the exporter down."""
        provider, self._provider = self._provider, None
        if provider is not None:
            self.tracer = trace.NoOpTracer()
            await _off_loop(provider.shutdown, FLUSH_S, self.shown)

    async def flush(self) -> None:
        """Export the spans queued so far."""
        if self._provider is not None:
            await _off_loop(self._provider.force_flush, FLUSH_S, self.shown)

    def server(self, request: web.Request, request_id: str, inbound: str) -> "ServerTrace":
        """The span of a client request, begun as it arrives, named by its method and route
        until the request is parsed (`ServerTrace.request`)."""
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else request.path
        span = self.tracer.start_span(
            f"{request.method} {route}",
            context=_PROPAGATOR.extract(request.headers),
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": request.method,
                "http.route": route,
                "url.path": request.path,
                "url.scheme": request.scheme,
                "gateway.inbound": inbound,
                "gateway.request_id": request_id,
            },
        )
        return ServerTrace(span)

    def client(self, backend: str, provider: str, model: str | None) -> "ClientTracer":
        """What begins the client spans of one backend's upstream requests."""
        return ClientTracer(self, backend, provider, model)


class _Trace:
    """One span, and what it saw of its answer: finish reasons by choice, usage, the first token."""

    __slots__ = ("_error", "_finish", "_first", "_start", "_usage", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self._start = time.perf_counter()
        self._finish: dict[int, Finish] = {}
        self._usage: Usage | None = None
        self._first = False
        self._error: str | None = None

    def watch(self, stream: EventStream) -> EventStream:
        """The stream, its events looked at on the way through (as it is when unsampled)."""
        return _Watched(stream, self) if self.span.is_recording() else stream

    def saw(self, events: list[Event]) -> None:
        for ev in events:
            if isinstance(ev, FinishEvent):
                self._finish[ev.index] = ev.reason
            elif isinstance(ev, UsageEvent):
                self._usage = ev.usage
            elif not self._first and isinstance(ev, TOKENS):
                self._first = True
                ttft = time.perf_counter() - self._start
                self.span.add_event(FIRST_TOKEN, {"gen_ai.response.time_to_first_chunk": ttft})
                self.span.set_attribute("gen_ai.response.time_to_first_chunk", ttft)

    def saw_answer(self, answer: Answer) -> None:
        if isinstance(answer, Result):
            for c in answer.choices:
                if c.finish is not None:
                    self._finish[c.index] = c.finish
        if answer.usage is not None:
            self._usage = answer.usage
        if answer.model:
            self.span.set_attribute("gen_ai.response.model", answer.model)

    def failed(self, e: BaseException) -> None:
        self._error = error_type(e)

    def closed(self, done: bool) -> None:
        """The watched stream was closed: at its end (`done`) or before."""

    def outcome(self, attrs: Attributes, failed: bool) -> None:
        """Finish reasons into `attrs`, in choice order; an answer that failed before any says
        "error"."""
        reasons = [FINISH_REASONS[f] for _, f in sorted(self._finish.items())]
        if not reasons and failed:
            reasons = ["error"]
        if reasons:
            attrs["gen_ai.response.finish_reasons"] = reasons


class _Watched:
    """A stream whose events a span sees as they pass; closing it tells the span."""

    __slots__ = ("_done", "_stream", "_trace")

    def __init__(self, stream: EventStream, trace: _Trace) -> None:
        self._stream = stream
        self._trace = trace
        self._done = False

    async def next(self) -> list[Event] | None:
        try:
            events = await self._stream.next()
        except Exception as e:  # a client that leaves cancels: that is no error of the stream's
            self._trace.failed(e)
            raise
        if events is None:
            self._done = True
        else:
            self._trace.saw(events)
        return events

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self._trace.closed(self._done)


class Outcome(Protocol):
    """What the exchange handler recorded of a request (gateway.proxy.observe.Exchange)."""

    status: int
    prompt_tokens: int | None
    completion_tokens: int | None
    disconnect: str | None
    upstream_error: str | None


class ServerTrace(_Trace):
    """The span of one client request: the current span, so the parent of its upstream
    requests' spans, from its start to `end`."""

    __slots__ = ("_token",)

    def __init__(self, span: Span) -> None:
        super().__init__(span)
        self._token = otel_context.attach(trace.set_span_in_context(span))

    def request(self, req: Request, route: str, backend: str, provider: str, model: str | None) -> None:
        """What the request asks for, once parsed and routed; the span is named after it
        ("chat {model}"). `model`: the backend's, for a request that names none."""
        if not self.span.is_recording():
            return
        operation = OPERATIONS[req.task]
        model = req.model or model
        self.span.update_name(f"{operation} {model}" if model else operation)
        attrs = request_attributes(req, operation, provider, model)
        attrs["gateway.route"] = route
        attrs["gateway.backend"] = backend
        self.span.set_attributes(attrs)

    def end(self, ex: Outcome) -> None:
        """End the span with the request's outcome: status, token counts, how it ended. A 5xx, or
        a stream broken after its headers went out, is an error; a client that left is not
        (`gateway.disconnect` says when it left)."""
        span = self.span
        try:
            if span.is_recording():
                status = ex.status
                attrs: Attributes = {"http.response.status_code": status}
                usage_attributes(attrs, ex.prompt_tokens, ex.completion_tokens)
                if ex.disconnect:
                    attrs["gateway.disconnect"] = ex.disconnect
                error = self._error or ex.upstream_error
                failed = status >= 500 or (status < 400 and error is not None)
                self.outcome(attrs, failed)
                if failed:
                    attrs["error.type"] = error or str(status)
                    span.set_status(Status(StatusCode.ERROR, error or str(status)))
                span.set_attributes(attrs)
            span.end()
        finally:
            otel_context.detach(self._token)


class ClientTracer:
    """Begins the client spans of one backend's upstream requests."""

    __slots__ = ("_backend", "_model", "_provider", "_tracing")

    def __init__(self, tracing: Tracing, backend: str, provider: str, model: str | None) -> None:
        self._tracing = tracing
        self._backend = backend
        self._provider = provider
        self._model = model

    def start(self, part: Request) -> "ClientTrace":
        """The span of one upstream request (one fan-out branch), a child of the current span.
        Named after the model the backend is asked for."""
        operation = OPERATIONS[part.task]
        model = self._model or part.model
        attrs = request_attributes(part, operation, self._provider, model)
        attrs["gateway.backend"] = self._backend
        span = self._tracing.tracer.start_span(
            f"{operation} {model}" if model else operation, kind=SpanKind.CLIENT, attributes=attrs
        )
        return ClientTrace(span)


class ClientTrace(_Trace):
    """The span of one upstream request, across its failover attempts."""

    __slots__ = ("_ended",)

    def __init__(self, span: Span) -> None:
        super().__init__(span)
        self._ended = False

    def inject(self, headers: dict[str, str]) -> None:
        """The trace context the backend is to get (`traceparent`, `tracestate`), into `headers`."""
        _PROPAGATOR.inject(headers, context=trace.set_span_in_context(self.span))

    def retry(self, attempt: int, replica: int, failure: GatewayError | None) -> None:
        """Attempt `attempt` (1 the first retry) begins: `replica` failed the one before."""
        attrs: Attributes = {"http.request.resend_count": attempt, "gateway.replica": replica}
        if failure is not None:
            attrs["error.type"] = error_type(failure)
        self.span.add_event(RETRY, attrs)

    def replied(self, replica: int, attempt: int, resp: aiohttp.ClientResponse) -> None:
        """A replica answered (any status): which one, where, and what it said."""
        if not self.span.is_recording():
            return
        attrs: Attributes = {
            "http.request.method": resp.method,
            "http.response.status_code": resp.status,
            "gateway.replica": replica,
        }
        if resp.url.host:
            attrs["server.address"] = resp.url.host
        if resp.url.port is not None:
            attrs["server.port"] = resp.url.port
        if attempt:
            attrs["http.request.resend_count"] = attempt
        self.span.set_attributes(attrs)

    def answered(self, answer: Answer) -> None:
        """A whole answer came: the span ends with it."""
        self.saw_answer(answer)
        self._end(False)

    def fail(self, e: BaseException) -> None:
        """The upstream request failed, or was cancelled (not an error: the client left, or
        another branch failed first): the span ends."""
        if not isinstance(e, asyncio.CancelledError):
            self.failed(e)
        self._end(isinstance(e, asyncio.CancelledError))

    def closed(self, done: bool) -> None:
        self._end(not done and self._error is None)

    def _end(self, cancelled: bool) -> None:
        if self._ended:
            return
        self._ended = True
        span = self.span
        if span.is_recording():
            attrs: Attributes = {}
            usage = self._usage
            if usage is not None:
                usage_attributes(attrs, usage.prompt_tokens, usage.completion_tokens)
            if cancelled:
                # The gateway closed it first: the client left, a stop string matched, a deadline
                # passed, or another branch of the request failed.
                attrs["gateway.cancelled"] = True
            self.outcome(attrs, self._error is not None)
            if self._error is not None:
                attrs["error.type"] = self._error
                span.set_status(Status(StatusCode.ERROR, self._error))
            span.set_attributes(attrs)
        span.end()


def request_attributes(req: Request, operation: str, provider: str, model: str | None) -> Attributes:
    """The GenAI attributes of what a request asks for."""
    p = req.params
    attrs: Attributes = {"gen_ai.operation.name": operation, "gen_ai.provider.name": provider}
    if model:
        attrs["gen_ai.request.model"] = model
    if req.stream:
        attrs["gen_ai.request.stream"] = True
    if p.max_tokens is not None:
        attrs["gen_ai.request.max_tokens"] = p.max_tokens
    if p.choices != 1:
        attrs["gen_ai.request.choice.count"] = p.choices
    for name, key in _PARAMS:
        value = getattr(p, name)
        if value is not None:
            attrs[key] = value
    return attrs


def usage_attributes(attrs: Attributes, prompt_tokens: int | None, completion_tokens: int | None) -> None:
    if prompt_tokens is not None:
        attrs["gen_ai.usage.input_tokens"] = prompt_tokens
    if completion_tokens is not None:
        attrs["gen_ai.usage.output_tokens"] = completion_tokens


def error_type(e: BaseException) -> str:
    """A low-cardinality name for what went wrong: an upstream failure's class (as the metric
    gateway_upstream_errors_total labels it), a gateway error's kind, else the exception's type."""
    if isinstance(e, UpstreamError):
        return e.upstream_class.value
    if isinstance(e, GatewayError):
        return e.kind.value
    return type(e).__qualname__


async def _off_loop(call: Callable[[], object], timeout: float, endpoint: str) -> None:
    """Run a blocking SDK call (an export) on a daemon thread of its own and wait at most
    `timeout` for it: a collector that does not answer holds neither the event loop nor a stop
    for long, and the thread keeps no process alive."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    def run() -> None:
        try:
            call()
        except Exception:
            log.exception("tracing: exporting spans to %s failed", endpoint)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is gone: no one waits any more
                loop.call_soon_threadsafe(settle)

    threading.Thread(target=run, name="gateway-trace-export", daemon=True).start()
    try:
        await asyncio.wait_for(done, timeout)
    except TimeoutError:
        log.warning("tracing: the collector at %s did not take the last spans within %gs", endpoint, timeout)
