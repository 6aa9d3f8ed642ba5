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

What the spans record is gateway.spans': attributes after OpenTelemetry's GenAI conventions
(`gen_ai.operation.name`, `gen_ai.request.*`, `gen_ai.usage.*`, `gen_ai.response.finish_reasons`;
the first token is an event), with a few HTTP and `gateway.*` ones; docs/operations.md (Tracing)
lists them. Spans hold names, numbers and finish reasons only: never a prompt, a
completion, a stop string or an error's text. This module owns the SDK: the provider, the
sampler, the exporter, and the spans' beginnings.

Ending a span only queues it: the SDK's batch processor exports from a thread of its own, so the
event loop never waits for the collector (a full queue drops spans). Unsampled requests get
non-recording spans, which only carry the trace context on.
"""

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind
from yarl import URL

from gateway import __version__
from gateway.neutral.types import Request
from gateway.spans import OPERATIONS, PROPAGATOR, ClientTrace, ServerTrace, request_attributes

log = logging.getLogger("gateway")
# The longest one export may take, and the longest an app's stop waits for its last spans.
EXPORT_TIMEOUT_S = 5.0
FLUSH_S = 3.0  # within what a worker's parent allows beyond the grace period (gateway.workers)


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

    def server(
        self, method: str, route: str, path: str, scheme: str, headers: Mapping[str, str], request_id: str, inbound: str
    ) -> ServerTrace:
        """The span of a client request, begun as it arrives, named by its method and `route`
        (the mounted path it matched) until the request is parsed (`ServerTrace.request`)."""
        span = self.tracer.start_span(
            f"{method} {route}",
            context=PROPAGATOR.extract(headers),
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": method,
                "http.route": route,
                "url.path": path,
                "url.scheme": scheme,
                "gateway.inbound": inbound,
                "gateway.request_id": request_id,
            },
        )
        return ServerTrace(span)

    def client(self, backend: str, provider: str, model: str | None) -> "ClientTracer":
        """What begins the client spans of one backend's upstream requests."""
        return ClientTracer(self, backend, provider, model)


class ClientTracer:
    """Begins the client spans of one backend's upstream requests."""

    __slots__ = ("_backend", "_model", "_provider", "_tracing")

    def __init__(self, tracing: Tracing, backend: str, provider: str, model: str | None) -> None:
        self._tracing = tracing
        self._backend = backend
        self._provider = provider
        self._model = model

    def start(self, part: Request) -> ClientTrace:
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
