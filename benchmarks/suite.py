"""The run's sequence: which proxy is loaded with which scenario, in which order, and where.

Placement: the proxy under test (the floor or the gateway, one process, one at a time) runs on
the first core; nginx, wrk, the paced upstream and this script share the second. First direct
to the stub, then the floor alone, then the gateway, each of its JSON, stream, paced and
one-connection rows in rounds between floor runs of the same kind (a floor idles beside it on
its core for those); then the memory soak and `--workers 2` against one worker (not --quick).
Every answer is checked once before its load, and the outcome recorded.
"""

from __future__ import annotations

import signal
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from benchmarks import answers, peers, scenarios, stub
from benchmarks.answers import Expect
from benchmarks.figures import Findings
from benchmarks.measure import WRK_ERRORS, Meter, Row, Settings, median_round, memory_mib
from benchmarks.procs import Procs, Serving, SetupError, check_config, free_port, log, pin_workers
from benchmarks.scenarios import BASELINE, PACED, PASS_THROUGH, SCENARIOS, Scenario

# The rows every scenario has: (kind, stream), JSON and streams at many connections.
LOADED = (("json", False), ("stream", True))
STREAMED = ("stream", "paced")


class Suite:
    """One run: the processes, and the findings so far."""

    def __init__(self, settings: Settings, tmp: Path, procs: Procs, cores: list[int]) -> None:
        self.s = settings
        self.tmp = tmp
        self.procs = procs
        self.proxy_core = cores[:1]
        self.load_core = cores[1:2] or cores[:1]  # a lone core takes everything
        self.both_cores = cores[:2]
        self.meter = Meter(settings, tmp, self.proxy_core, self.load_core)
        self.found = Findings()
        self.nginx_port = free_port()
        self.paced_port = free_port()

    def run(self) -> None:
        self.start_upstreams()
        self.direct()
        self.floor()
        tokenizer = self.tmp / "tokenizer"
        from tests.tokenizer_kit import build_tokenizer_folder  # imports pytest: only when needed

        build_tokenizer_folder(tokenizer)
        config = self.tmp / "gateway.yaml"
        conf = scenarios.gateway_config(tokenizer, self.nginx_port, self.paced_port)
        config.write_text(yaml.safe_dump(conf, sort_keys=False))
        check_config(config)
        self.gateway(config)
        if self.s.peers:
            self.peers()
        if not self.s.quick:
            self.two_workers(config)

    # Rows

    def row(self, proxy: str, sc: Scenario, kind: str, url: str, connections: int) -> Row:
        return Row(proxy, sc.key, sc.title, kind, connections, self.s.seconds, url)

    def load(
        self,
        proxy: str,
        sc: Scenario,
        kind: str,
        url: str,
        connections: int,
        pids: list[int],
        expect: Expect | None,
        cores: list[int] | None = None,
    ) -> Row:
        """One measured run, not recorded (a round, or a floor run beside one)."""
        body = sc.client.body(kind in STREAMED)
        return self.meter.measure(self.row(proxy, sc, kind, url, connections), body, pids, expect, cores)

    def checked(self, proxy: str, sc: Scenario, kind: str, url: str) -> Expect | None:
        """The scenario's answer checked once; None (and recorded) when it is wrong."""
        stream = kind in STREAMED
        body = sc.client.body(stream)
        entry: dict[str, Any] = {"proxy": proxy, "scenario": sc.key, "kind": kind, "url": url}
        try:
            expect = answers.check(url, sc.client.shape, stream, body, stub.ANSWERS[sc.answer])
        except answers.CHECK_ERRORS as e:
            entry["problem"] = f"{type(e).__name__}: {e}"
            log(f"  {proxy} {sc.key} {kind}: WRONG ANSWER: {entry['problem']}")
            self.found.correctness.append(entry)
            return None
        entry |= {"ok": True, "events": expect.events}
        self.found.correctness.append(entry)
        return expect

    # The proxies

    def start_upstreams(self) -> None:
        self.procs.nginx(stub.nginx_conf(self.tmp, self.nginx_port), self.nginx_port, self.load_core)
        answers.check_stub(self.nginx_port)
        self.procs.paced(self.paced_port, self.tmp / "www", self.s.paced_gap_ms, self.load_core)

    def baseline_rows(self, proxy: str, base: str, pids: list[int]) -> None:
        """JSON, stream and one-connection rows of the OpenAI chat answer at the stub's paths."""
        sc = BASELINE
        for kind, stream in LOADED:
            url = base + sc.client.path(stream)
            expect = self.checked(proxy, sc, kind, url)
            if expect is not None and pids:
                self.meter.warm(url, sc.client.body(stream))
            self.found.rows.append(self.load(proxy, sc, kind, url, self.s.connections, pids, expect))
        url = base + sc.client.json_path
        expect = self.checked(proxy, sc, "latency", url)
        self.found.rows.append(self.load(proxy, sc, "latency", url, 1, pids, expect))

    def direct(self) -> None:
        log("direct to the stub (nginx):")
        self.baseline_rows("direct", f"http://127.0.0.1:{self.nginx_port}", [])

    def floor(self) -> None:
        log("the aiohttp floor:")
        with self.procs.floor("floor", self.nginx_port, self.proxy_core) as floor:
            self.baseline_rows("floor", floor.url, [floor.pid])
        # The paced upstream behind a floor of its own: one proxy loaded at a time.
        with self.procs.floor("floor-paced", self.paced_port, self.proxy_core) as floor:
            url = floor.url + BASELINE.client.stream_path
            expect = self.checked("floor", BASELINE, "paced", url)
            self.found.rows.append(
                self.load("floor", BASELINE, "paced", url, self.s.paced_connections, [floor.pid], expect)
            )

    def gateway(self, config: Path) -> None:
        log(f"the gateway, one worker ({self.s.rounds} round(s) a row, each between floor runs):")
        gw = self.procs.gateway("gateway", config, 1, self.proxy_core)
        try:
            # The floor again, idle on the same core but for its reference runs.
            with (
                self.procs.floor("floor-ref", self.nginx_port, self.proxy_core) as floor,
                self.procs.floor("floor-paced-ref", self.paced_port, self.proxy_core) as paced,
            ):
                self.found.memory["idle"] = memory_mib(gw.pid)
                self.gateway_rows(gw, floor, paced)
            if not self.s.quick:
                self.soak(gw)
            log(f"  gateway's log:\n{self.procs.log_tail(gw.proc, 5)}")
        finally:
            self.procs.stop(gw.proc, signal.SIGINT)

    def gateway_rows(self, gw: Serving, floor: Serving, paced_floor: Serving) -> None:
        """Every scenario's rows, each the median of its rounds, each round between two runs of
        `floor` (`paced_floor` for paced rows) of the same kind."""
        fb, pids = BASELINE, [gw.pid]
        refs: dict[str, tuple[str, Expect | None]] = {}
        for kind, stream in LOADED:
            url = floor.url + fb.client.path(stream)
            body = fb.client.body(stream)
            refs[kind] = (url, answers.check(url, fb.client.shape, stream, body, stub.ANSWERS[fb.answer]))
        refs["latency"] = refs["json"]
        purl = paced_floor.url + fb.client.stream_path
        refs["paced"] = (purl, self.checked("floor", fb, "paced", purl))

        def rounds(sc: Scenario, kind: str, stream: bool, connections: int, by: str) -> None:
            variant = "json" if kind == "latency" else kind
            url = gw.url + scenarios.path(sc, variant, stream)
            expect = self.checked("gateway", sc, kind, url)
            if expect is not None and kind in ("json", "stream"):
                self.meter.warm(url, sc.client.body(stream))
            ref_url, ref_expect = refs[kind]
            ref_pid = (paced_floor if kind == "paced" else floor).pid
            gateway_run = partial(self.load, "gateway", sc, kind, url, connections, pids, expect)
            floor_run = partial(self.load, "floor", fb, kind, ref_url, connections, [ref_pid], ref_expect)
            # --quick checks answers, not speed: no floor runs around its one round.
            self.found.rows.append(median_round(self.s.rounds, gateway_run, None if self.s.quick else floor_run, by))

        for sc in self.scenarios(SCENARIOS):
            for kind, stream in LOADED:
                rounds(sc, kind, stream, self.s.connections, "rps")
            if sc.latency:
                rounds(sc, "latency", False, 1, "p50")
        for sc in self.scenarios(PACED):
            rounds(sc, "paced", True, self.s.paced_connections, "cpu")

    def scenarios(self, among: list[Scenario]) -> list[Scenario]:
        return [sc for sc in among if not self.s.only or sc.key in self.s.only]

    def peers(self) -> None:
        """Each peer in front of the same stub, loaded once per scenario and kind as the floor
        is; one that cannot be installed or started is skipped, and the reason noted."""
        stub_url = f"http://127.0.0.1:{self.nginx_port}"
        by_key = {sc.key: sc for sc in SCENARIOS}
        for peer in peers.PEERS:
            log(f"the peer {peer.title}:")
            if not any(r.scenario in [sc.key for sc in self.scenarios(SCENARIOS)] for r in peer.routes):
                continue
            for kind, stream in LOADED:
                port = free_port()
                argv = peers.argv(peer, port, stub_url, stream)
                if isinstance(argv, str):
                    self.found.peers_skipped[peer.name] = argv
                    log(f"  skipped: {argv}")
                    break
                try:
                    proc = self.procs.start(f"{peer.name}-{kind}", argv, self.proxy_core, peers.environment())
                    self.procs.wait_listening(proc, port)
                except SetupError as e:
                    self.found.peers_skipped[peer.name] = f"did not start: {str(e).splitlines()[0]}"
                    log(f"  skipped: {self.found.peers_skipped[peer.name]}")
                    break
                try:
                    for route in peer.routes:
                        sc = by_key[route.scenario]
                        headers = route.headers_for(stub_url, stream)
                        url = f"http://127.0.0.1:{port}{route.stream_path if stream else route.path}"
                        expect = self._peer_check(peer.name, sc, kind, url, headers)
                        if expect is not None:
                            self.meter.warm(url, sc.client.body(stream), headers)
                        row = self.row(peer.name, sc, kind, url, self.s.connections)
                        row.title = peer.title
                        body = sc.client.body(stream)
                        self.found.rows.append(self.meter.measure(row, body, [proc.pid], expect, None, headers))
                finally:
                    self.procs.stop(proc)

    def _peer_check(self, name: str, sc: Scenario, kind: str, url: str, headers: dict[str, str]) -> Expect | None:
        stream = kind in STREAMED
        entry: dict[str, Any] = {"proxy": name, "scenario": sc.key, "kind": kind, "url": url}
        try:
            answer = stub.ANSWERS[sc.answer]
            expect = answers.check(url, sc.client.shape, stream, sc.client.body(stream), answer, headers)
        except answers.CHECK_ERRORS as e:
            entry["problem"] = f"{type(e).__name__}: {str(e)[:300]}"
            log(f"  {name} {sc.key} {kind}: WRONG ANSWER: {entry['problem']}")
            self.found.peer_problems.append(entry)
            return None
        return expect

    def soak(self, gw: Serving) -> None:
        """JSON requests, every scenario in turn, until soak_requests are answered; RSS after each
        run, to see that it stays flat. What came before (every scenario's runs) is the warm-up."""
        log(f"  memory soak: {self.s.soak_requests:,} JSON requests")
        good = [sc for sc in self.scenarios(SCENARIOS) if self.found.good("gateway", sc.key, "json")]
        before = memory_mib(gw.pid)
        total, errors = 0, 0
        series: list[dict[str, float]] = []
        while good and total < self.s.soak_requests:
            sc = good[len(series) % len(good)]
            url = gw.url + scenarios.path(sc, "json", False)
            w = self.meter.wrk(url, sc.client.json_body, self.s.connections, self.s.seconds, None)
            total += int(w["requests"])
            errors += sum(int(w[k]) for k in WRK_ERRORS)
            series.append({"requests": total, "VmRSS": memory_mib(gw.pid)["VmRSS"]})
        after = memory_mib(gw.pid)
        self.found.memory |= {
            "before_soak": before,
            "after_soak": after,
            "soak_requests": total,
            "soak_errors": errors,
            "growth_mib": after["VmRSS"] - before["VmRSS"],
            "series": series,
        }
        log(f"  RSS {before['VmRSS']:.1f} MiB before, {after['VmRSS']:.1f} MiB after {total:,} requests")

    def two_workers(self, config: Path) -> None:
        """`--workers 2` against one worker on JSON pass-through, in rounds like the other rows:
        both gateways are up at once (the one not loaded is idle), one worker's runs before and
        after each run of two. Each of the two workers is pinned to a core of its own; the
        second shares its core with nginx and wrk."""
        log("the gateway, one worker against two (one on each core; nginx and wrk share the second):")
        one = self.procs.gateway("gateway-one", config, 1, self.proxy_core)
        two = self.procs.gateway("gateway-workers", config, 2, self.both_cores)
        try:
            pids = pin_workers(two.pid, self.both_cores)
            sc, n = PASS_THROUGH, self.s.connections
            url1, url2 = (g.url + scenarios.path(sc, "json", False) for g in (one, two))
            expect1 = self.checked("gateway", sc, "workers", url1)
            expect2 = self.checked("gateway-2", sc, "workers", url2)
            for url, expect in ((url1, expect1), (url2, expect2)):
                if expect is not None:
                    self.meter.warm(url, sc.client.json_body)
            singles: list[Row] = []

            def single() -> Row:
                singles.append(self.load("gateway", sc, "workers", url1, n, [one.pid], expect1))
                return singles[-1]

            pair = partial(self.load, "gateway-2", sc, "workers", url2, n, pids, expect2, self.both_cores)
            row = median_round(self.s.rounds, pair, single)
            failed = [f for s in singles for f in s.failed]
            self.found.workers = {
                # One worker: the mean of its runs on either side of the median round of two.
                "one": {
                    "rps": row.floor_rps,
                    "cpu_us_per_req": row.floor_cpu_us_per_req,
                    "req_per_cpu_s": 1e6 / row.floor_cpu_us_per_req if row.floor_cpu_us_per_req else None,
                    "failed": failed,
                    "runs": [asdict(s) for s in singles],
                },
                "two": asdict(row),
                "worker_pids": len(pids),
            }
        finally:
            self.procs.stop(one.proc, signal.SIGINT)
            self.procs.stop(two.proc, signal.SIGINT, wait_s=15)
