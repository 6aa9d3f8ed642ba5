"""What a run found, and the figures made of it: each row's ratios to the floor's and to the
direct row of its kind, the targets (each with what this run measured; never adjusted), and
the run's failures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.measure import EVENTS, Row
from benchmarks.scenarios import BASELINE, PACED, SCENARIOS

# "Flat" memory: RSS grows by no more than this over the soak.
FLAT_MIB = 2.0


@dataclass
class Findings:
    """The rows measured, the answers checked, the memory soak and the workers' run."""

    rows: list[Row] = field(default_factory=list)
    correctness: list[dict[str, Any]] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)
    workers: dict[str, Any] = field(default_factory=dict)
    peers_skipped: dict[str, str] = field(default_factory=dict)  # peer -> why it was not measured
    peer_problems: list[dict[str, Any]] = field(default_factory=list)  # a peer's wrong answers

    @classmethod
    def of(cls, results: dict[str, Any]) -> Findings:
        """The findings a results file holds."""
        rows = [Row(**r) for r in results["rows"]]
        found = cls(rows, results["correctness"], results["memory"], results["workers"])
        found.peers_skipped = results.get("peers_skipped", {})
        found.peer_problems = results.get("peer_problems", [])
        return found

    def find(self, proxy: str, scenario: str, kind: str) -> Row | None:
        return next((r for r in self.rows if (r.proxy, r.scenario, r.kind) == (proxy, scenario, kind)), None)

    def good(self, proxy: str, scenario: str, kind: str) -> Row | None:
        row = self.find(proxy, scenario, kind)
        return row if row is not None and not row.failed else None

    def ratios(self) -> None:
        """Every row against the floor's and the direct row of its kind, from this run."""
        for row in self.rows:
            for ref_proxy, attr in (("floor", "vs_floor"), ("direct", "vs_direct")):
                ref = self.good(ref_proxy, BASELINE.key, row.kind)
                if ref is None or ref is row or row.failed:
                    continue
                out: dict[str, float] = {"rps": row.rps / ref.rps, "p50_ms": row.p50_ms / ref.p50_ms}
                out["p99_ms"] = row.p99_ms / ref.p99_ms
                if row.cpu_us_per_req and ref.cpu_us_per_req:
                    out["cpu_per_req"] = row.cpu_us_per_req / ref.cpu_us_per_req
                if attr == "vs_floor" and row.floor_rps:
                    # The floor runs beside this one, rather than the one minutes before.
                    out["rps"] = row.rps / row.floor_rps
                    if row.cpu_us_per_req and row.floor_cpu_us_per_req:
                        out["cpu_per_req"] = row.cpu_us_per_req / row.floor_cpu_us_per_req
                    if row.floor_p50_ms:
                        out["p50_ms"] = row.p50_ms / row.floor_p50_ms
                setattr(row, attr, out)
            direct = self.good("direct", BASELINE.key, "latency")
            if row.kind == "latency" and direct is not None and row is not direct and not row.failed:
                row.added_p50_ms = row.p50_ms - direct.p50_ms

    def failures(self) -> list[str]:
        # A peer that fails is noted beside the tables, and fails nothing of the gateway's.
        ours = ("direct", "floor", "gateway", "gateway-2")
        failed = [r for r in self.rows if r.failed and r.proxy in ours]
        out = [f"{r.proxy} {r.scenario} {r.kind}: {'; '.join(r.failed)}" for r in failed]
        out += [f"{c['proxy']} {c['scenario']} {c['kind']}: {c['problem']}" for c in self.correctness if "problem" in c]
        for name in ("one", "two"):
            if self.workers.get(name, {}).get("failed"):
                out.append(f"workers {name}: {'; '.join(self.workers[name]['failed'])}")
        if self.memory.get("soak_errors"):
            out.append(f"memory soak: {self.memory['soak_errors']} requests failed")
        return out

    def targets(self, quick: bool) -> list[dict[str, Any]]:
        """The targets, each with what this run measured; never adjusted."""
        out: list[dict[str, Any]] = []

        def add(target: str, value: float | None, met: bool | None, measured: str) -> None:
            out.append({"target": target, "value": value, "met": met, "measured": measured})

        def worst(
            target: str, kind: str, translating: bool, bound: float, figure: Callable[[Row], float | None]
        ) -> None:
            """The worst gateway scenario of the kind against the bound (a ratio floor, or a
            ceiling in ms for the added latency)."""
            scenarios = [sc for sc in SCENARIOS if sc.translating == translating and (kind != "latency" or sc.latency)]
            rows = [(self.good("gateway", sc.key, kind), sc) for sc in scenarios]
            failed = [sc.title for r, sc in rows if r is None]
            values = [(v, sc, r) for r, sc in rows if r is not None and (v := figure(r)) is not None]
            if failed or not values:
                add(target, None, False, "failed: " + ", ".join(failed) if failed else "not measured")
                return
            ceiling = kind == "latency"
            v, sc, row = (max if ceiling else min)(values, key=lambda x: x[0])
            where = f"worst: {sc.title}" if len(values) > 1 else ""
            direct = self.good("direct", BASELINE.key, "latency")
            if ceiling and row.floor_p50_ms and direct:
                # The absolute bound leans on the machine's speed: the floor's figure beside it says how.
                where += f"{'; ' if where else ''}the floor's beside it: {row.floor_p50_ms - direct.p50_ms:.2f} ms"
            where = f" ({where})" if where else ""
            add(target, v, v <= bound if ceiling else v >= bound, f"{v:.2f}{' ms' if ceiling else 'x'}{where}")

        for target, kind, translating, bound in (
            ("JSON pass-through >= 1.1x floor req/s", "json", False, 1.1),
            ("JSON translating >= 0.85x floor req/s", "json", True, 0.85),
            ("Streams pass-through (model aliased or not) >= 0.8x floor streams/s", "stream", False, 0.8),
            ("Streams translating >= 0.45x floor streams/s, every backend shape", "stream", True, 0.45),
        ):
            worst(target, kind, translating, bound, lambda r: r.vs_floor.get("rps"))
        self._paced_target(add)
        for translating, which in ((False, "pass-through"), (True, "translating")):
            target = f"Added p50 at 1 connection <= 0.35 ms (JSON, {which})"
            worst(target, "latency", translating, 0.35, lambda r: r.added_p50_ms)
        self._peer_targets(add)
        idle = self.memory.get("idle", {}).get("VmRSS")
        add(
            "RSS idle <= 70 MiB",
            idle,
            None if idle is None else idle <= 70,
            f"{idle:.1f} MiB" if idle else "not measured",
        )
        growth = self.memory.get("growth_mib")
        n = self.memory.get("soak_requests", 0)
        add(
            f"RSS flat over >= 100k requests (grows <= {FLAT_MIB:g} MiB)",
            growth,
            None if growth is None else growth <= FLAT_MIB and n >= 100_000,
            "not measured (--quick)" if growth is None else f"{growth:+.1f} MiB over {n:,} requests",
        )
        one, two = self.workers.get("one"), self.workers.get("two")
        target = "2 workers >= 1.7x one worker req/s"
        if one and two and one["rps"] and not one["failed"] and not two["failed"]:
            v = two["rps"] / one["rps"]
            rounds = ", ".join(f"{r:.2f}x" for r in two["round_ratios"])
            add(target, v, v >= 1.7, f"{v:.2f}x (rounds: {rounds})" if rounds else f"{v:.2f}x")
        else:
            add(target, None, None, "not measured (--quick)" if quick else "failed")
        return out

    def _paced_target(self, add: Callable[[str, float | None, bool | None, str], None]) -> None:
        """CPU per event of the worst paced scenario against the floor's paced runs beside it."""
        target = "Paced: CPU per event <= 1.5x the floor's, every scenario"
        rows = [(self.good("gateway", sc.key, "paced"), sc) for sc in PACED]
        failed = [sc.title for r, sc in rows if r is None]
        values = [
            (r.cpu_us_per_event / (r.floor_cpu_us_per_req / EVENTS), sc, r)
            for r, sc in rows
            if r is not None and r.cpu_us_per_event and r.floor_cpu_us_per_req
        ]
        if failed or not values:
            add(target, None, False, "failed: " + ", ".join(failed) if failed else "not measured")
            return
        v, sc, row = max(values, key=lambda x: x[0])
        floor_us = (row.floor_cpu_us_per_req or 0.0) / EVENTS
        add(target, v, v <= 1.5, f"{v:.2f}x (worst: {sc.title}, {row.cpu_us_per_event:.1f} vs {floor_us:.1f} us)")

    def peer_ratios(self) -> list[tuple[Row, Row, float]]:
        """(peer row, gateway row, the gateway's requests per CPU second over the peer's) for
        every scenario and kind a peer served."""
        out = []
        for row in self.rows:
            if row.proxy in ("direct", "floor", "gateway", "gateway-2") or row.failed or not row.req_per_cpu_s:
                continue
            gw = self.good("gateway", row.scenario, row.kind)
            if gw is not None and gw.req_per_cpu_s:
                out.append((row, gw, gw.req_per_cpu_s / row.req_per_cpu_s))
        return out

    def _peer_targets(self, add: Callable[[str, float | None, bool | None, str], None]) -> None:
        ratios = self.peer_ratios()
        for peer, kind, bound in (("vllm-router", "json", 0.35), ("vllm-router", "stream", 0.3)):
            target = f"Beside {peer}: >= {bound}x its requests per CPU second ({kind} pass-through)"
            found = [v for r, _, v in ratios if r.proxy == peer and r.kind == kind and r.scenario == "openai-openai"]
            if found:
                add(target, found[0], found[0] >= bound, f"{found[0]:.2f}x")
            else:
                add(target, None, None, self.peers_skipped.get(peer, "not measured"))
        target = "Beside Portkey: >= 5x its requests per CPU second, every scenario both serve"
        found_pk = [(v, r) for r, _, v in ratios if r.proxy == "portkey"]
        if found_pk:
            v, r = min(found_pk, key=lambda x: x[0])
            add(target, v, v >= 5, f"{v:.1f}x (worst: {r.scenario} {r.kind})")
        else:
            add(target, None, None, self.peers_skipped.get("portkey", "not measured"))
