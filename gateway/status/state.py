"""What the status page shows, as one JSON document: the live configuration's routes and
backends, each replica's state, and each route's last minute, all made of the configuration and
the metrics' recent samples (gateway.recent), so that with worker processes they are the pod's.

Nothing secret goes in: backends and routes by their names in the configuration, replicas by
their position in `urls:`, never a URL, a header or a key.
"""

import itertools
import math
import re
from collections.abc import Sequence
from typing import Any

from gateway.config import Config, route_paths
from gateway.recent import Recent, bucket_growth, growth, latest, quantile

QUANTILES = (("p50", 0.5), ("p95", 0.95))
# A path's variable part as the router matches it ({model:.+}), shown by its name only.
_PATTERN = re.compile(r"\{(\w+):[^}]*\}")
HISTOGRAMS = (
    ("ttft", "gateway_time_to_first_token_seconds_bucket"),
    ("itl", "gateway_inter_token_latency_seconds_bucket"),
)


def _finite(v: float | None, digits: int = 6) -> float | None:
    return None if v is None or math.isnan(v) or math.isinf(v) else round(v, digits)


def _per_second(counts: Sequence[float], gaps: Sequence[float]) -> list[float | None]:
    return [_finite(c / g if g > 0 else None, 3) for c, g in zip(counts, gaps, strict=True)]


class Figures:
    """Each route's figures over the samples `recent` holds: one value per interval between
    two samples for the charts, and one over the whole window."""

    def __init__(self, recent: Recent) -> None:
        self.recent = recent
        times = list(recent.times)
        self.times = times[1:]
        self.gaps = [b - a for a, b in itertools.pairwise(times)]
        self.span = recent.span()
        self.requests = recent.series("gateway_requests_total", ("route",))
        self.failed = recent.series("gateway_requests_total", ("route",), lambda d: d.get("status", "")[:1] == "5")
        self.in_flight = recent.series("gateway_in_flight_requests", ("route",))
        self.buckets = {key: self._buckets(name) for key, name in HISTOGRAMS}

    def _buckets(self, name: str) -> dict[str, dict[float, list[float]]]:
        out: dict[str, dict[float, list[float]]] = {}
        for (route, le), counts in self.recent.series(name, ("route", "le")).items():
            out.setdefault(route, {})[float(le)] = counts
        return out

    def _of(self, table: dict[tuple[str, ...], list[float]], name: str) -> list[float]:
        """A route's values in each sample (NaN throughout where it has no series)."""
        return table.get((name,)) or [math.nan] * len(self.recent.times)

    def route(self, name: str) -> dict[str, Any]:
        done = growth(self._of(self.requests, name))
        failed = growth(self._of(self.failed, name))
        total, errors = math.fsum(done), math.fsum(failed)
        in_flight = self._of(self.in_flight, name)
        out: dict[str, Any] = {
            "requests": round(total),
            "rps": _finite(total / self.span if self.span else None, 3),
            "errors": round(errors),
            "error_rate": _finite(errors / total if total else None, 4),
            "in_flight": _finite(latest(in_flight), 0),
        }
        series: dict[str, list[float | None]] = {
            "rps": _per_second(done, self.gaps),
            "error_rate": [_finite(f / d if d else None, 4) for f, d in zip(failed, done, strict=True)],
            "in_flight": [_finite(v, 0) for v in in_flight[1:]],
        }
        for figure, _ in HISTOGRAMS:
            whole, each = self._quantiles(self.buckets[figure].get(name, {}))
            for label, _q in QUANTILES:
                out[f"{figure}_{label}_s"] = whole[label]
                series[f"{figure}_{label}_s"] = [e[label] for e in each]
        out["series"] = series
        return out

    def _quantiles(
        self, by_bound: dict[float, list[float]]
    ) -> tuple[dict[str, float | None], list[dict[str, float | None]]]:
        """The quantiles of what a histogram counted over the window, and in each interval."""
        last = len(self.times)
        none: dict[str, float | None] = {label: None for label, _ in QUANTILES}
        if not by_bound or not last:
            return none, [none] * last

        def of(first: int, end: int) -> dict[str, float | None]:
            buckets = bucket_growth(by_bound, first, end)
            if buckets[-1][1] <= 0:
                return none
            return {label: _finite(quantile(q, buckets)) for label, q in QUANTILES}

        return of(0, last), [of(i, i + 1) for i in range(last)]

    def errors(self) -> list[dict[str, Any]]:
        """What went wrong over the window, by class and route, the most frequent first."""
        recent = self.recent
        found: list[dict[str, Any]] = []
        sources = (
            ("gateway_upstream_errors_total", ("route", "error"), "upstream {}", None),
            ("gateway_client_disconnects_total", ("route", "phase"), "client gone {}", None),
            (
                "gateway_requests_total",
                ("route", "status"),
                "answered {}",
                lambda d: d.get("status", "")[:1] in ("4", "5"),
            ),
        )
        for name, by, label, where in sources:
            for (route, what), counts in recent.series(name, by, where).items():
                n = round(math.fsum(growth(counts)))
                if n:
                    found.append({"class": label.format(what.replace("_", " ")), "route": route, "count": n})
        return sorted(found, key=lambda e: (-e["count"], e["class"], e["route"]))


def _replicas(recent: Recent, backend: str, n: int) -> list[dict[str, Any]]:
    def mine(d: dict[str, str]) -> bool:
        return d.get("backend") == backend

    up = recent.series("gateway_backend_replica_up", ("replica",), mine)
    until = recent.series("gateway_backend_replica_ejected_until_timestamp_seconds", ("replica",), mine)
    out = []
    for i in range(n):
        value = latest(up.get((str(i),), []))
        back = latest(until.get((str(i),), []))
        state = "unknown" if value is None else "up" if value >= 1 else "ejected"
        out.append({"replica": i, "state": state, "back_at": _finite(back) if state == "ejected" and back else None})
    return out


def document(config: Config, recent: Recent, now: float) -> dict[str, Any]:
    """The status page's state: the configuration `config` and the window `recent` holds."""
    figures = Figures(recent)
    live = recent.series("gateway_config_info", ("hash",))
    hashes = sorted(h for (h,), values in live.items() if (latest(values) or 0) >= 1)
    paths = route_paths(config)
    routes = []
    for r in config.routes:
        backend = config.backends[r.backend]
        routes.append(
            {
                "name": r.name,
                "dialect": r.dialect,
                "paths": [{"method": m, "path": _PATTERN.sub(r"{\1}", p)} for m, p in paths[r.name]],
                "models": r.models,
                "backend": r.backend,
                "backend_dialect": backend.dialect,
                **figures.route(r.name),
            }
        )
    queued = recent.series("gateway_backend_queued_requests", ("backend",))
    backends = []
    for name, b in config.backends.items():
        backends.append(
            {
                "name": name,
                "dialect": b.dialect,
                "simulated": b.simulate,
                "replicas": _replicas(recent, name, max(len(b.targets()), 1)),
                "queued": _finite(latest(queued.get((name,), [])), 0),
                "max_concurrent": b.max_concurrent,
                "max_queued": b.max_queued if b.max_concurrent is not None else None,
            }
        )
    loaded = recent.series("gateway_config_loaded_timestamp_seconds", ())
    return {
        "now": round(now, 3),
        "window_s": round(figures.span, 3),
        "samples": len(recent.times),
        "times": [round(t, 3) for t in figures.times],
        "config": {"hashes": hashes, "loaded_at": _finite(latest(loaded.get((), [])), 3)},
        "routes": routes,
        "backends": backends,
        "errors": figures.errors(),
    }
