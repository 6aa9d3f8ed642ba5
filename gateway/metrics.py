"""Prometheus metrics of DESIGN.md §1, on a registry owned by each app.

Labels are route and backend names from the config and fixed enums, never client-supplied
strings, so cardinality stays bounded.
"""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Latency buckets span what LLM traffic does: sub-10 ms cache hits to multi-minute generations.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60, 120)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 5)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
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
            "Request in to first generated token out",
            ["route", "backend"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "gateway_inter_token_latency_seconds",
            "Gap between streamed chunks that carry tokens",
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
            "Tokens reported or counted",
            ["route", "backend", "kind"],
            registry=r,
        )
        self.in_flight = Gauge(
            "gateway_in_flight_requests",
            "Requests being served",
            ["route"],
            registry=r,
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
