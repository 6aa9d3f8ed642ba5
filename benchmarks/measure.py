"""Measurement: one wrk run and what it cost the proxy, and a row as the median of its rounds.

A run's requests/s, p50 and p99 are wrk's; its cost is the proxy's own CPU seconds (utime +
stime from /proc/PID/stat) over the requests (or streamed events) it served, which holds
whatever the load generator does, and how busy the proxy's cores were with anything else
meanwhile (/proc/stat). Memory is VmRSS and VmHWM from /proc/PID/status.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import stub
from benchmarks.answers import Expect
from benchmarks.procs import SetupError, log, stat_fields

CLK_TCK = os.sysconf("SC_CLK_TCK")
EVENTS = stub.STREAM_EVENTS  # events in every upstream stream: CPU per event divides by this
WRK_ERRORS = ("connect", "read", "write", "status", "timeout")

# wrk's script. Every thread POSTs the same body. With BENCH_CHECK=1 each answer is looked at
# (status 200, the answer's final marker, at least as many `data:` events as the answer checked
# before the run); defining `response` makes wrk buffer and hand over every body, which costs,
# so it is left undefined in measured runs. `done` prints the figures as one JSON line.
LUA = r"""
wrk.method = "POST"
wrk.body = os.getenv("BENCH_BODY")
wrk.headers["Content-Type"] = "application/json"
local extra = os.getenv("BENCH_HEADERS")
if extra then
  for line in extra:gmatch("[^\n]+") do
    local k, v = line:match("^([^:]+):%s*(.*)$")
    if k then wrk.headers[k] = v end
  end
end
local threads = {}
function setup(thread) table.insert(threads, thread) end
if os.getenv("BENCH_CHECK") == "1" then
  local marker = os.getenv("BENCH_MARKER")
  local min_events = tonumber(os.getenv("BENCH_EVENTS"))
  checked, incomplete = 0, 0
  function response(status, headers, body)
    checked = checked + 1
    local _, events = body:gsub("data:", "")
    if status ~= 200 or not body:find(marker, 1, true) or events < min_events then
      incomplete = incomplete + 1
    end
  end
end
function done(summary, latency, requests)
  local checked, incomplete = 0, 0
  for _, t in ipairs(threads) do
    checked = checked + (t:get("checked") or 0)
    incomplete = incomplete + (t:get("incomplete") or 0)
  end
  local e = summary.errors
  io.write(string.format('BENCH {"requests":%.0f,"duration_us":%.0f,"p50_us":%.0f,"p99_us":%.0f,' ..
    '"connect":%.0f,"read":%.0f,"write":%.0f,"status":%.0f,"timeout":%.0f,"checked":%.0f,"incomplete":%.0f}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout, checked, incomplete))
end
"""


@dataclass
class Settings:
    seconds: int
    connections: int
    paced_connections: int
    paced_gap_ms: float
    soak_requests: int
    quick: bool
    rounds: int = 3
    stream_events: int = EVENTS
    peers: bool = True  # vllm-router and Portkey beside the gateway (installed when missing)
    only: tuple[str, ...] = ()  # the scenarios measured (all when empty)


@dataclass
class Row:
    """One wrk run and what it cost the proxy."""

    proxy: str  # direct, floor, gateway
    scenario: str
    title: str
    kind: str  # json, stream, latency (json at one connection), paced, workers
    connections: int
    seconds: int
    url: str = ""
    requests: int = 0
    rps: float = 0.0
    events_per_s: float | None = None
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)
    checked: int | None = None  # answers wrk's Lua looked at (--quick)
    incomplete: int | None = None  # of those, the ones not complete
    cpu_s: float | None = None
    cpu_us_per_req: float | None = None
    cpu_us_per_event: float | None = None
    req_per_cpu_s: float | None = None
    cpu_s_each: list[float] = field(default_factory=list)  # per proxy process (the workers)
    # Cores' worth of CPU the proxy used, and what anything else used on the proxy's cores
    # meanwhile: on a shared machine, other work there shows here (and in lower requests/s).
    proxy_busy: float | None = None
    others_busy: float | None = None
    added_p50_ms: float | None = None
    failed: list[str] = field(default_factory=list)
    # The floor's runs of the same kind just before and just after this one (gateway rows),
    # averaged: a shared machine's speed drifts over minutes, so each gateway row is compared
    # with a floor measured on either side of it.
    floor_rps: float | None = None
    floor_cpu_us_per_req: float | None = None
    floor_p50_ms: float | None = None
    # A gateway row is the median of its rounds (Settings.rounds), each between floor runs: every
    # round's ratio to its floor (requests/s; CPU per request for paced rows, p50 for one
    # connection), in run order.
    round_ratios: list[float] = field(default_factory=list)
    vs_floor: dict[str, float] = field(default_factory=dict)
    vs_direct: dict[str, float] = field(default_factory=dict)


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU seconds these processes have used so far."""
    total = 0
    for pid in pids:
        f = stat_fields(pid)
        total += int(f[11]) + int(f[12])
    return total / CLK_TCK


def cores_busy_seconds(cores: list[int]) -> float:
    """CPU seconds these cores have spent busy so far, whoever ran (/proc/stat: all but idle and iowait)."""
    total = 0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *ticks = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, ticks[:8])
            total += user + nice + system + irq + softirq + steal
    return total / CLK_TCK


def memory_mib(pid: int) -> dict[str, float]:
    """VmRSS (resident now) and VmHWM (the peak resident), in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


class Meter:
    """wrk runs from the load core (`load`), and what they cost the processes measured, on the
    proxy's cores (`proxy`) unless told otherwise."""

    def __init__(self, settings: Settings, tmp: Path, proxy: list[int], load: list[int]) -> None:
        self.s = settings
        self.proxy_core = proxy
        self.load_core = load
        self.lua = tmp / "post.lua"
        self.lua.write_text(LUA)

    def wrk(
        self,
        url: str,
        body: dict[str, Any],
        connections: int,
        seconds: int,
        expect: Expect | None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        env = {**os.environ, "BENCH_BODY": json.dumps(body)}
        if headers:
            env["BENCH_HEADERS"] = "\n".join(f"{k}: {v}" for k, v in headers.items())
        if expect is not None and self.s.quick:
            env |= {"BENCH_CHECK": "1", "BENCH_MARKER": expect.marker, "BENCH_EVENTS": str(expect.events)}
        # wrk's timeout (default 2 s) counts slow answers as errors; 10 s leaves it to find
        # answers that never come, while slow ones show in p99.
        argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "--latency"]
        argv += ["-s", str(self.lua), url]
        cores = ",".join(map(str, self.load_core))
        done = subprocess.run(
            ["taskset", "-c", cores, *argv], env=env, capture_output=True, text=True, timeout=seconds + 60
        )
        for line in done.stdout.splitlines():
            if line.startswith("BENCH "):
                figures: dict[str, Any] = json.loads(line[6:])
                return figures
        raise SetupError(f"wrk printed no figures (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")

    def warm(self, url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        # Connection pools fill, first-call paths run; not in --quick, which has no time to spare.
        if not self.s.quick:
            self.wrk(url, body, self.s.connections, 1, None, headers)

    def measure(
        self,
        row: Row,
        body: dict[str, Any],
        pids: list[int],
        expect: Expect | None,
        cores: list[int] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Row:
        """Load `row.url` for `row.seconds`, and the CPU the processes `pids` (on `cores`, by
        default the proxy's) spent meanwhile. A scenario whose answer failed its check (`expect`
        None) is not loaded: its row is failed."""
        if expect is None:
            row.failed.append("its answer failed the check before the run: not loaded")
        else:
            self._load(row, body, pids, expect, cores or self.proxy_core, headers)
        return row

    def _load(
        self,
        row: Row,
        body: dict[str, Any],
        pids: list[int],
        expect: Expect,
        cores: list[int],
        headers: dict[str, str] | None = None,
    ) -> None:
        kind = row.kind
        cpu0, busy0 = [cpu_seconds([pid]) for pid in pids], cores_busy_seconds(cores)
        w = self.wrk(row.url, body, row.connections, row.seconds, expect, headers)
        cpu1, busy1 = [cpu_seconds([pid]) for pid in pids], cores_busy_seconds(cores)
        wall = w["duration_us"] / 1e6
        row.requests = int(w["requests"])
        row.rps = row.requests / wall
        row.p50_ms, row.p99_ms = w["p50_us"] / 1000, w["p99_us"] / 1000
        row.errors = {k: int(w[k]) for k in WRK_ERRORS if w[k]}
        if self.s.quick:
            row.checked, row.incomplete = int(w["checked"]), int(w["incomplete"])
        if kind in ("stream", "paced"):
            row.events_per_s = row.rps * EVENTS
        if pids and row.requests:
            row.cpu_s_each = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
            row.cpu_s = sum(row.cpu_s_each)
            row.proxy_busy = row.cpu_s / wall
            row.others_busy = max(0.0, (busy1 - busy0 - row.cpu_s) / wall)
            row.cpu_us_per_req = 1e6 * row.cpu_s / row.requests
            row.req_per_cpu_s = row.requests / row.cpu_s if row.cpu_s else None
            if kind in ("stream", "paced"):
                row.cpu_us_per_event = row.cpu_us_per_req / EVENTS
        if row.errors:
            row.failed.append(f"wrk counted errors: {row.errors}")
        if row.incomplete:
            row.failed.append(f"{row.incomplete} of {row.checked} answers were not complete")
        if not row.requests:
            row.failed.append("no request was answered")
        extra = ""
        if row.cpu_us_per_req is not None:
            extra = f", {row.cpu_us_per_req:.0f} us CPU/req, busy {row.proxy_busy:.2f}, others {row.others_busy:.2f}"
        log(
            f"  {row.proxy:<9} {row.scenario:<18} {kind:<7} c{row.connections:<3} {row.rps:>9,.0f} req/s  "
            f"p50 {row.p50_ms:.2f} ms  p99 {row.p99_ms:.2f} ms{extra}{'  FAILED' if row.failed else ''}"
        )


def set_floor(row: Row, refs: list[Row]) -> None:
    """`row`'s floor figures: the mean of its reference runs that did not fail."""
    good = [r for r in refs if not r.failed and r.rps and r.cpu_us_per_req is not None]
    if good:
        row.floor_rps = sum(r.rps for r in good) / len(good)
        row.floor_cpu_us_per_req = sum(r.cpu_us_per_req or 0.0 for r in good) / len(good)
        row.floor_p50_ms = sum(r.p50_ms for r in good) / len(good)


def median_round(rounds: int, gateway: Callable[[], Row], floor: Callable[[], Row] | None, by: str = "rps") -> Row:
    """A gateway row from `rounds` runs, each between two floor runs (the one after a round is
    the one before the next): the round whose ratio to the mean of its two floor runs is the
    median, with every round's ratio. The machine's speed drifts over seconds as well as
    minutes, and a median of interleaved rounds holds where one pair does not. A round that
    failed fails the row. `by`: the figure the ratio is of, requests/s, or CPU per request or p50
    (for those, less is better and the ratio is the gateway's over the floor's)."""
    if floor is None:
        return gateway()
    done: list[Row] = []
    before = floor()
    for _ in range(rounds):
        row = gateway()
        after = floor()
        set_floor(row, [before, after])
        done.append(row)
        before = after
        if row.failed:
            return row

    def ratio(r: Row) -> float:
        if by == "cpu":
            return (r.cpu_us_per_req or 0.0) / r.floor_cpu_us_per_req if r.floor_cpu_us_per_req else 0.0
        if by == "p50":
            return r.p50_ms / r.floor_p50_ms if r.floor_p50_ms else 0.0
        return r.rps / r.floor_rps if r.floor_rps else 0.0

    median = sorted(done, key=ratio)[len(done) // 2]
    median.round_ratios = [round(ratio(r), 3) for r in done]
    return median
