"""Observation: what one exchange did, turned into metrics and its one access line.

The exchange handler keeps an `Exchange` record as the request goes (when tokens went out, the
counts the backend reported, how it ended); the engine hands back when each upstream request
started and ended. At the end, `finish` writes both into the metrics and the access log; nothing
else records either.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.adapters.tooluse import ToolReading
from gateway.logs import access_enabled, access_log
from gateway.metrics import Metrics, RouteMetrics
from gateway.neutral.events import TOKENS, Event, UsageEvent
from gateway.neutral.types import Usage
from gateway.proxy.peers import Arrival, Network
from gateway.proxy.plan import UpstreamTimes
from gateway.proxy.routing import Route, RouteGroup

_TOKENS = frozenset(TOKENS)


@dataclass(eq=False, slots=True)
class Exchange:
    """Timings and outcome of one request, recorded when it ends."""

    start: float
    request_id: str = ""
    route: Route | None = None  # once chosen
    status: int = 500
    first_token: float = 0.0
    last_token: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # The route's metrics, set once the route is known: each gap between token chunks is
    # observed as it happens rather than collected.
    metrics: RouteMetrics | None = None
    upstream: UpstreamTimes | None = None
    # How the answer was read for tool calls written as text (it counts those that did not parse).
    tools: ToolReading | None = None
    upstream_error: str | None = None
    disconnect: str | None = None
    key: str | None = None  # the API key's log name
    body_read: bool = False  # the client's body was read whole

    def observe(self, events: list[Event]) -> None:
        # A read brings a few events (a token's, or a run of them, and a frame): looked at one
        # by one, cheaper than a set of their kinds, which a read of many takes instead.
        if len(events) < 4:
            token = usage = False
            for ev in events:
                kind = type(ev)
                if kind in _TOKENS:
                    token = True
                elif kind is UsageEvent:
                    usage = True
        else:
            kinds = set(map(type, events))
            token, usage = not _TOKENS.isdisjoint(kinds), UsageEvent in kinds
        if usage:
            for ev in events:
                if type(ev) is UsageEvent:
                    assert isinstance(ev, UsageEvent)
                    self.counted(ev.usage)
        if token:
            now = time.perf_counter()
            if self.first_token:
                if self.metrics is not None:
                    self.metrics.gap(now - self.last_token)
            else:
                self.first_token = now
            self.last_token = now

    def counted(self, usage: Usage | None) -> None:
        if usage is None:
            return
        if usage.prompt_tokens is not None:
            self.prompt_tokens = usage.prompt_tokens
        if usage.completion_tokens is not None:
            self.completion_tokens = usage.completion_tokens

    def upstream_seconds(self, now: float) -> float:
        return self.upstream.total(now) if self.upstream is not None else 0.0


def finish(
    metrics: Metrics, arrival: Arrival, group: RouteGroup, ex: Exchange, trusted: Sequence[Network] | None
) -> None:
    """Record the exchange: into the metrics, and (unless `trusted` is None: no access log) its
    access line."""
    now = time.perf_counter()
    upstream = ex.upstream_seconds(now)
    _record(metrics, group, ex, now, upstream)
    if trusted is not None and access_enabled():
        _access(arrival, group, ex, trusted, now, upstream)


def _record(metrics: Metrics, group: RouteGroup, ex: Exchange, now: float, upstream: float) -> None:
    if not metrics.enabled:
        return
    route, status = ex.route, ex.status
    if route is None:
        # No route chosen (bad body, unknown model): counted against the group's first route so
        # the request is visible without letting a client-chosen name become a label.
        r = group.routes[0]
        metrics.count_request(r.name, r.backend.name, group.dialect, r.backend.view.dialect, str(status))
        return
    b = route.backend.name
    rm = ex.metrics if ex.metrics is not None else metrics.route(route.name, b)
    metrics.count_request(route.name, b, group.dialect, route.backend.view.dialect, str(status))
    total = now - ex.start
    rm.duration.observe(total)
    if upstream:
        rm.upstream.observe(upstream)
        rm.overhead.observe(max(total - upstream, 0.0))
    if ex.first_token:
        rm.ttft.observe(ex.first_token - ex.start)
    if ex.prompt_tokens:
        rm.prompt_tokens += ex.prompt_tokens
    if ex.completion_tokens:
        rm.completion_tokens += ex.completion_tokens
    if ex.upstream_error:
        metrics.upstream_errors.labels(route.name, b, ex.upstream_error).inc()
    if ex.disconnect:
        metrics.disconnects.labels(route.name, ex.disconnect).inc()
    if ex.tools is not None and ex.tools.failures:
        metrics.tool_parse_failures.labels(route.name).inc(ex.tools.failures)


def _ms(seconds: float) -> float | None:
    return round(seconds * 1000.0, 3) if seconds else None


def _access(
    arrival: Arrival, group: RouteGroup, ex: Exchange, trusted: Sequence[Network], now: float, upstream: float
) -> None:
    """The one access-log line of this request: who, names, status, timings, token counts; no content."""
    route = ex.route
    backend = route.backend if route is not None else None
    access_log(
        {
            "request_id": ex.request_id,
            "client": arrival.client(trusted),
            "key": ex.key,
            "route": route.name if route is not None else None,
            "backend": backend.name if backend is not None else None,
            "inbound": group.dialect,
            "outbound": backend.conf.dialect if backend is not None else None,
            "method": arrival.method,
            "path": arrival.path,
            "status": ex.status,
            "duration_ms": _ms(now - ex.start),
            "upstream_ms": _ms(upstream),
            "ttft_ms": _ms(ex.first_token - ex.start) if ex.first_token else None,
            "prompt_tokens": ex.prompt_tokens,
            "completion_tokens": ex.completion_tokens,
            "upstream_error": ex.upstream_error,
            "disconnect": ex.disconnect,
            "tool_parse_failures": ex.tools.failures if ex.tools is not None else None,
        }
    )
