"""Prometheus metrics (the names in docs/operations.md are a contract), on a
registry owned by each app, and their exposition.

Labels are route and backend names from the config and fixed enums, never client-supplied
strings, so cardinality stays bounded. Per-route children are bound once and cached, so the
hot path (one observation per streamed chunk) does no label lookup.

The request path does not call prometheus-client: it adds to plain numbers per route
(`RouteMetrics`), and `Metrics.flush` adds those to prometheus-client's values when a scrape
asks, and otherwise FLUSH_S after something was recorded (so a scrape of another worker process
sees it), and when the process stops.

With `gateway serve --workers N` the parent sets PROMETHEUS_MULTIPROC_DIR before the workers
start: prometheus-client then keeps every value in per-process files in that folder, and a
scrape of any worker aggregates them all (see `exposition`). A single process needs nothing.

Pool-member mode (`metrics: {model_server_gauges: true}`) adds the vLLM-named gauges the Gateway
API Inference Extension's endpoint picker reads from a model-server pod (gateway.modelserver).

The status page reads the last minute of a few of these series (`Metrics.recent`, sampled off
the request path while the page is watched; gateway.recent), every worker's when there are several.
"""

import asyncio
import contextlib
import math
import os
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

from gateway.modelserver import ModelServerGauges
from gateway.recent import Recent

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST

# Latency buckets span what LLM traffic does: sub-10 ms cache hits to multi-minute generations.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60, 120)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 5)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)

LAG_INTERVAL_S = 0.25
# How long what the request path records may wait before it is in prometheus-client's values
# (where a scrape of another worker process reads it).
FLUSH_S = 0.05
LAG_WINDOW_S = 10.0
# What the status page reads (gateway.recent).
RECENT_SERIES = (
    "gateway_requests_total",
    "gateway_time_to_first_token_seconds_bucket",
    "gateway_inter_token_latency_seconds_bucket",
    "gateway_in_flight_requests",
    "gateway_upstream_errors_total",
    "gateway_client_disconnects_total",
    "gateway_backend_replica_up",
    "gateway_backend_replica_ejected_until_timestamp_seconds",
    "gateway_backend_queued_requests",
    "gateway_config_info",
    "gateway_config_loaded_timestamp_seconds",
)


def multiprocess_dir() -> str | None:
    """The shared metrics folder when several worker processes serve, else None."""
    return os.environ.get(MULTIPROC_ENV) or None


class Pending:
    """Observations of one histogram child that are not in its values yet: how many fell in each
    bucket, and their sum."""

    __slots__ = ("_child", "bounds", "counts", "sum")

    def __init__(self, child: Histogram, bounds: tuple[float, ...]) -> None:
        self._child = child
        self.bounds = (*bounds, math.inf)
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # The first bucket whose bound is at least the value, as prometheus-client counts.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def flush(self) -> None:
        counts = self.counts
        if not any(counts):
            return
        # A histogram child's values are its buckets' counts and its sum, and `observe` only
        # adds one to a bucket and the value to the sum: adding the counts and the sum of many
        # observations is the same. (prometheus-client has no call that adds many at once; the
        # test suite compares the two ways.)
        buckets = self._child._buckets
        for i, n in enumerate(counts):
            if n:
                buckets[i].inc(n)
                counts[i] = 0
        self._child._sum.inc(self.sum)
        self.sum = 0.0


class RouteMetrics:
    """The metrics of one (route, backend) pair, as the request path records them: plain numbers,
    which `Metrics.flush` adds to prometheus-client's values. (Each prometheus-client update takes
    a lock and a few calls; made per request, the eleven of a JSON request came to about a tenth
    of what the gateway itself adds to it.)"""

    __slots__ = (
        "_completion_child",
        "_due",
        "_in_flight_child",
        "_prompt_child",
        "completion_tokens",
        "duration",
        "in_flight",
        "itl",
        "overhead",
        "prompt_tokens",
        "ttft",
        "upstream",
    )

    def __init__(self, metrics: "Metrics", route: str, backend: str) -> None:
        self._due = metrics.due
        # Observed by `gateway.proxy.observe` at a request's end, which then counts the request
        # (`Metrics.count_request`, which sees that they are flushed).
        self.duration = Pending(metrics.duration.labels(route, backend), DURATION_BUCKETS)
        self.ttft = Pending(metrics.ttft.labels(route, backend), TTFT_BUCKETS)
        self.upstream = Pending(metrics.upstream.labels(route, backend), DURATION_BUCKETS)
        self.overhead = Pending(metrics.overhead.labels(route, backend), OVERHEAD_BUCKETS)
        self.itl = Pending(metrics.itl.labels(route, backend), ITL_BUCKETS)  # see `gap`
        self._prompt_child = metrics.tokens.labels(route, backend, "prompt")
        self._completion_child = metrics.tokens.labels(route, backend, "completion")
        self._in_flight_child = metrics.in_flight.labels(route)
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.in_flight = 0  # the change since the last flush

    def started(self) -> None:
        self.in_flight += 1
        self._due()

    def ended(self) -> None:
        self.in_flight -= 1
        self._due()

    def gap(self, seconds: float) -> None:
        """The time between two chunks of a stream that carry tokens."""
        self.itl.observe(seconds)
        self._due()

    def flush(self) -> None:
        if self.in_flight:
            self._in_flight_child.inc(self.in_flight)
            self.in_flight = 0
        if self.prompt_tokens:
            self._prompt_child.inc(self.prompt_tokens)
            self.prompt_tokens = 0
        if self.completion_tokens:
            self._completion_child.inc(self.completion_tokens)
            self.completion_tokens = 0
        for pending in (self.duration, self.ttft, self.itl, self.upstream, self.overhead):
            pending.flush()


class Metrics:
    """The gateway's metric families. `enabled=False` (the simulator) records nothing at all,
    which matters in multi-process mode, where every value lands in the shared folder."""

    def __init__(self, registry: CollectorRegistry | None = None, enabled: bool = True) -> None:
        self.enabled = enabled
        self.registry = registry or CollectorRegistry()
        self._routes: dict[tuple[str, str], RouteMetrics] = {}
        self._requests: dict[tuple[str, ...], Counter] = {}
        self._counted: dict[tuple[str, ...], int] = {}  # requests counted since the last flush
        self._flush_at: asyncio.TimerHandle | None = None
        self._model_server: ModelServerGauges | None = None
        r = self.registry
        self.requests = Counter(
            "gateway_requests",
            "Requests answered, by final status",
            ["route", "backend", "inbound", "outbound", "status"],
            registry=r,
        )
        self.duration = Histogram(
            "gateway_request_duration_seconds",
            "Request in to last byte out",
            ["route", "backend"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "gateway_time_to_first_token_seconds",
            "Request in to first generated token out (streams only)",
            ["route", "backend"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "gateway_inter_token_latency_seconds",
            "Gap between consecutive streamed chunks that carry tokens",
            ["route", "backend"],
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.upstream = Histogram(
            "gateway_upstream_duration_seconds",
            "Upstream request sent to upstream response done",
            ["route", "backend"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "gateway_overhead_seconds",
            "Time spent in the gateway itself, upstream wait excluded",
            ["route", "backend"],
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "gateway_tokens",
            "Tokens reported by the backend (or counted), by kind",
            ["route", "backend", "kind"],
            registry=r,
        )
        # livesum: in multi-process mode the gauge is the sum over the workers still alive.
        self.in_flight = Gauge(
            "gateway_in_flight_requests",
            "Requests being served",
            ["route"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.upstream_errors = Counter(
            "gateway_upstream_errors",
            "Upstream failures by class",
            ["route", "backend", "error"],
            registry=r,
        )
        self.disconnects = Counter(
            "gateway_client_disconnects",
            "Clients that went away before the answer was complete",
            ["route", "phase"],
            registry=r,
        )
        # Tool calls a model wrote as text that could not be read as calls (given back as text).
        self.tool_parse_failures = Counter(
            "gateway_tool_call_parse_failures",
            "Tool calls in a model's text that did not parse",
            ["route"],
            registry=r,
        )
        self.loop_lag = Gauge(
            "gateway_event_loop_lag_seconds",
            f"How late the event loop ran a timer, the worst of the last {LAG_WINDOW_S:g}s",
            registry=r,
            multiprocess_mode="livemax",
        )
        # 1 while a replica takes requests, 0 while it is left out after failing (ejected).
        self.replica_up = Gauge(
            "gateway_backend_replica_up",
            "Whether a backend replica is taking requests (0 while ejected after failures)",
            ["backend", "replica"],
            registry=r,
            multiprocess_mode="livemin",
        )
        # When an ejected replica gets its next trial request; 0 while it takes requests. With
        # worker processes, the latest of theirs (each worker ejects on its own).
        self.replica_ejected_until = Gauge(
            "gateway_backend_replica_ejected_until_timestamp_seconds",
            "Unix time an ejected backend replica is next tried (0 while it takes requests)",
            ["backend", "replica"],
            registry=r,
            multiprocess_mode="livemax",
        )
        # Requests waiting for one of a backend's max_concurrent slots.
        self.queued = Gauge(
            "gateway_backend_queued_requests",
            "Requests waiting for a backend slot",
            ["backend"],
            registry=r,
            multiprocess_mode="livesum",
        )
        # Configuration loads: at start and on each reload (result: live or rejected), and the
        # hash of the configuration that is live.
        self.config_loads = Counter(
            "gateway_config_loads",
            "Configuration loads, at start and on reload",
            ["result"],
            registry=r,
        )
        self.config_info = Gauge(
            "gateway_config_info",
            "The configuration that is live (1 for its hash)",
            ["hash"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.config_loaded = Gauge(
            "gateway_config_loaded_timestamp_seconds",
            "Unix time the live configuration went live",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.recent = Recent(RECENT_SERIES, self._read_recent, self.flush)
        self._recent_families = (
            self.requests,
            self.ttft,
            self.itl,
            self.in_flight,
            self.upstream_errors,
            self.disconnects,
            self.replica_up,
            self.replica_ejected_until,
            self.queued,
            self.config_info,
            self.config_loaded,
        )

    def route(self, route: str, backend: str) -> RouteMetrics:
        rm = self._routes.get((route, backend))
        if rm is None:
            rm = self._routes[(route, backend)] = RouteMetrics(self, route, backend)
        return rm

    def due(self) -> None:
        """Something was recorded: it reaches prometheus-client's values within FLUSH_S (a
        scrape of this process flushes at once). Outside an event loop it waits for a scrape."""
        if self._flush_at is None:
            with contextlib.suppress(RuntimeError):
                self._flush_at = asyncio.get_running_loop().call_later(FLUSH_S, self.flush)

    def flush(self) -> None:
        """What the request path recorded, into prometheus-client's values: where a scrape reads
        them, this process's or, with worker processes, any of them."""
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        for rm in self._routes.values():
            rm.flush()
        counted, self._counted = self._counted, {}
        for key, n in counted.items():
            child = self._requests.get(key)
            if child is None:
                child = self._requests[key] = self.requests.labels(*key)
            child.inc(n)

    def model_server(self) -> ModelServerGauges:
        """The vLLM-named gauges of pool-member mode, registered the first time they are asked for
        (a gateway not in that mode shows none of them)."""
        if self._model_server is None:
            self._model_server = ModelServerGauges(self.registry)
        return self._model_server

    def count_request(self, route: str, backend: str, inbound: str, outbound: str, status: str) -> None:
        key = (route, backend, inbound, outbound, status)
        self._counted[key] = self._counted.get(key, 0) + 1
        self.due()

    def _read_recent(self) -> Iterable[Metric]:
        """(In a thread) the families that hold RECENT_SERIES: this process's, or every
        worker's in multi-process mode."""
        path = multiprocess_dir()
        if path is None:
            return [f for c in self._recent_families for f in c.collect()]
        return MultiProcessCollector(None, path=path).collect()  # type: ignore[no-untyped-call,no-any-return]

    def exposition(self) -> bytes:
        """The text a scrape returns: this registry, or every worker's values in multi-process mode."""
        self.flush()
        path = multiprocess_dir()
        if path is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
        if self._model_server is not None:
            registry.register(self._model_server.cache)  # this worker's own reading of the backend
        return generate_latest(registry)


async def watch_loop_lag(gauge: Gauge, interval_s: float = LAG_INTERVAL_S) -> None:
    """Sleep `interval_s` again and again; how much later than asked each wake-up comes is the
    time the loop spent on something that did not yield. The gauge shows the worst of the last
    LAG_WINDOW_S, so a stall is still visible to a scrape that comes a few seconds later."""
    recent: deque[float] = deque(maxlen=max(1, round(LAG_WINDOW_S / interval_s)))
    while True:
        t0 = time.perf_counter()
        await asyncio.sleep(interval_s)
        recent.append(max(time.perf_counter() - t0 - interval_s, 0.0))
        gauge.set(max(recent))
