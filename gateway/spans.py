"""What one request's spans record: the SERVER span of a client request and the CLIENT span of
each of its upstream requests, with their GenAI attributes (gateway.tracing makes the spans).

The server span is the current span while its request is handled, so each upstream request's
client span (each fan-out branch its own) is its child. A client span covers its upstream
request with every failover attempt: a retry is an event on it, not a span of its own. Spans
hold names, numbers and finish reasons only: never a prompt, a completion, a stop string or an
error's text. This module uses only OpenTelemetry's API, not its SDK.
"""

import asyncio
import time
from typing import Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from gateway.codec.capabilities import at_end
from gateway.codec.contract import EventStream
from gateway.neutral.errors import GatewayError, UpstreamError
from gateway.neutral.events import TOKENS, Event, FinishEvent, UsageEvent
from gateway.neutral.types import Answer, Finish, Request, Result, Task, Usage
from gateway.upstream import Target

Attributes = dict[str, AttributeValue]
FIRST_TOKEN = "gen_ai.first_token"
RETRY = "gateway.retry"
OPERATIONS = {Task.CHAT: "chat", Task.COMPLETION: "text_completion", Task.EMBEDDING: "embeddings"}
# OpenAI's words, the ones GenAI tools know; an abnormal end says so.
FINISH_REASONS: dict[Finish, str] = {
    Finish.EOS: "stop",
    Finish.STOP_STRING: "stop",
    Finish.STOP_TOKEN: "stop",
    Finish.LENGTH: "length",
    Finish.TOOL_CALLS: "tool_calls",
    Finish.CONTENT_FILTER: "content_filter",
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
PROPAGATOR = TraceContextTextMapPropagator()


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

    @property
    def ended(self) -> bool:
        return at_end(self._stream)

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


class ClientTrace(_Trace):
    """The span of one upstream request, across its failover attempts."""

    __slots__ = ("_ended",)

    def __init__(self, span: Span) -> None:
        super().__init__(span)
        self._ended = False

    def inject(self, headers: dict[str, str]) -> None:
        """The trace context the backend is to get (`traceparent`, `tracestate`), into `headers`."""
        PROPAGATOR.inject(headers, context=trace.set_span_in_context(self.span))

    def retry(self, attempt: int, replica: int, failure: GatewayError | None) -> None:
        """Attempt `attempt` (1 the first retry) begins: `replica` failed the one before."""
        attrs: Attributes = {"http.request.resend_count": attempt, "gateway.replica": replica}
        if failure is not None:
            attrs["error.type"] = error_type(failure)
        self.span.add_event(RETRY, attrs)

    def replied(self, replica: int, attempt: int, method: str, target: Target, status: int) -> None:
        """A replica answered (any status): which one, where, and what it said."""
        if not self.span.is_recording():
            return
        attrs: Attributes = {
            "http.request.method": method,
            "http.response.status_code": status,
            "gateway.replica": replica,
            "server.address": target.host,  # a unix socket's path, for a backend on one
        }
        if target.port:  # a unix socket has none
            attrs["server.port"] = target.port
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
