"""The performance benchmark: the stub direct, the bare aiohttp floor, and the gateway, in one run.

    .venv/bin/python -m benchmarks.run [--seconds 5] [--quick] [--out FILE]

Run from the repository's root. This module owns the whole run: it installs wrk and nginx when
they are missing, starts every process it measures (nginx serving the stub, benchmarks/stub.py;
the paced upstream, benchmarks/paced.py; the floor, benchmarks/floor.py; the gateway), checks each
scenario's answer before loading it, drives the load with wrk, reads CPU and memory from /proc,
and writes the figures as JSON (benchmarks/results.json) and markdown tables (stdout). Every
process it started is ended when it stops, failed or interrupted.

Placement: the proxy under test (the floor or the gateway, one process, one at a time) runs on
the first core; nginx, wrk, the paced upstream and this script share the second. The proxy's
CPU seconds (utime + stime from /proc/PID/stat) around each wrk run, divided by the requests
(or streamed events) served, say what a request costs it whatever the load generator does.

What is measured, each figure also as a ratio to the floor's and to the direct row's of the same
kind from this run (a gateway JSON, stream or paced row: the median of --rounds runs, each
against the floor runs just before and after it):
- JSON and 200-event streams at 64 connections (16 with --quick): requests/s, p50, p99, CPU;
- JSON at one connection: p50, p99, and the p50 added to the direct one;
- paced streams (one event per write, a gap apart, from benchmarks/paced.py) at 16 connections:
  CPU per streamed event, floor against the gateway's pass-through and OpenAI -> MindIE routes;
- the gateway's memory idle after start and over 100,000 JSON requests (not with --quick);
- `--workers 2`, one worker pinned to each core, against one worker on JSON pass-through, in
  rounds like the rows above (not with --quick).

Exit status: 0 when every answer was complete and no request failed, 1 otherwise, 2 on a
setup failure, 3 when wrk or nginx is missing and cannot be installed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from benchmarks import stub

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results.json"
EXIT_FAILED, EXIT_SETUP, EXIT_NO_TOOLS = 1, 2, 3
CLK_TCK = os.sysconf("SC_CLK_TCK")
EVENTS = stub.STREAM_EVENTS  # events in every upstream stream: CPU per event divides by this
# "Flat" memory: RSS grows by no more than this over the soak.
FLAT_MIB = 2.0

# wrk's script. Every thread POSTs the same body. With BENCH_CHECK=1 each answer is looked at
# (status 200, the answer's final marker, at least as many `data:` events as the answer checked
# before the run); defining `response` makes wrk buffer and hand over every body, which costs,
# so it is left undefined in measured runs. `done` prints the figures as one JSON line.
LUA = r"""
wrk.method = "POST"
wrk.body = os.getenv("BENCH_BODY")
wrk.headers["Content-Type"] = "application/json"
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

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello"}]}
INFER_TOKEN = {"input_id": [9906, 11, 1268, 527, 499, 3432, 30], "parameters": {"max_new_tokens": 256, "details": True}}
TGI = {"inputs": "Say hello", "parameters": {"max_new_tokens": 256}}


@dataclass(frozen=True)
class Scenario:
    """One way through the gateway: the client's dialect and paths, the backend's, and the answer."""

    key: str  # the routes' prefixes (/json/KEY, /stream/KEY, /paced/KEY) and the rows' name
    title: str
    dialect: str  # the client's (the route's) dialect
    shape: str  # the answer's shape as the client gets it: openai (chat), mindie (native), tgi
    backend: str  # the backend's dialect
    answer: str  # what the backend answers: a key of stub.ANSWERS
    json_path: str
    stream_path: str
    json_body: dict[str, Any]
    stream_body: dict[str, Any]
    translating: bool = True


def chat(key: str, title: str, backend: str, answer: str, translating: bool = True) -> Scenario:
    """An OpenAI chat client's scenario."""
    path = "/v1/chat/completions"
    return Scenario(
        key, title, "openai", "openai", backend, answer, path, path, CHAT, {**CHAT, "stream": True}, translating
    )


SCENARIOS = [
    chat("openai-openai", "OpenAI -> OpenAI (pass-through)", "openai", "openai chat", translating=False),
    chat("openai-mindie", "OpenAI -> MindIE chat", "mindie", "mindie chat"),
    chat("openai-triton", "OpenAI -> Triton (TRT-LLM, chat template)", "triton", "triton generate"),
    Scenario(
        "mindie-openai",
        "MindIE /infer_token -> OpenAI",
        "mindie",
        "mindie",
        "openai",
        "openai completion",  # token ids go to /v1/completions as the prompt
        "/infer_token",
        "/infer_token",
        {**INFER_TOKEN, "stream": False},
        {**INFER_TOKEN, "stream": True},
    ),
    Scenario(
        "tgi-openai",
        "TGI /generate -> OpenAI",
        "tgi",
        "tgi",
        "openai",
        "openai completion",
        "/generate",
        "/generate_stream",
        TGI,
        TGI,
    ),
    Scenario(
        "databricks-openai",
        "Databricks invocations -> OpenAI",
        "databricks",
        "openai",  # Databricks chat answers are OpenAI's chat shape
        "openai",
        "openai chat",
        "/serving-endpoints/gpt-4o-mini/invocations",
        "/serving-endpoints/gpt-4o-mini/invocations",
        {"messages": CHAT["messages"]},
        {"messages": CHAT["messages"], "stream": True},
    ),
]
PASS_THROUGH = SCENARIOS[0]
# The paced measurement: pass-through, and one translating scenario.
PACED = [SCENARIOS[0], SCENARIOS[1]]
# The floor and direct rows: OpenAI chat at the stub's own paths, the streams under /stream.
BASELINE = Scenario(
    "openai-chat",
    "OpenAI chat",
    "openai",
    "openai",
    "openai",
    "openai chat",
    "/v1/chat/completions",
    "/stream/v1/chat/completions",
    CHAT,
    {**CHAT, "stream": True},
    translating=False,
)
# Each backend dialect's base path under the stub (stub.Answer.base) and its settings.
BACKENDS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai": ("", {}),
    "mindie": ("/mindie", {"model": "qwen"}),  # chat always goes to MindIE's /v1/chat/completions
    "triton": ("", {"model": "bench", "options": {"flavor": "trtllm"}}),  # tokenizer: added at run time
}


class SetupError(Exception):
    """The benchmark could not be set up: nothing was measured."""


class ToolsMissing(SetupError):
    """wrk or nginx is missing and could not be installed."""


# ----------------------------------------------------------------------------- tools and machine


def nginx_binary() -> str | None:
    # Debian puts nginx in /usr/sbin, which is not on every user's PATH.
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin:/sbin")


def ensure_tools() -> None:
    """wrk and nginx, installed with apt-get when missing (as root, or with password-less sudo)."""
    if not shutil.which("taskset"):
        raise ToolsMissing("taskset (util-linux) not found: it pins each process to its core")
    missing = [name for name, found in (("wrk", shutil.which("wrk")), ("nginx", nginx_binary())) if not found]
    if not missing:
        return
    if not shutil.which("apt-get"):
        raise ToolsMissing(f"{' and '.join(missing)} not found, and there is no apt-get to install them with")
    if os.geteuid() == 0:
        sudo: list[str] = []
    elif shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        sudo = ["sudo", "-n"]
    else:
        raise ToolsMissing(f"{' and '.join(missing)} not found; installing needs root: apt-get install -y wrk nginx")
    install = [*sudo, "apt-get", "install", "-y", "wrk", "nginx"]
    for attempt in (install, [*sudo, "apt-get", "update"], install):
        log(f"{' and '.join(missing)} missing: running {' '.join(attempt)}")
        done = subprocess.run(attempt, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if attempt[-1] != "update" and done.returncode == 0:
            break
    if not (shutil.which("wrk") and nginx_binary()):
        raise ToolsMissing("apt-get install -y wrk nginx did not install them")


def first_line(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    return (done.stdout + done.stderr).strip().splitlines()[0] if (done.stdout + done.stderr).strip() else "?"


def machine() -> dict[str, Any]:
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    git = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    return {
        "arch": platform.machine(),
        "cpu": cpu,
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "wrk": first_line(["wrk", "-v"]).split(" [")[0],
        "nginx": first_line([nginx_binary() or "nginx", "-v"]).split(": ", 1)[-1],
        "git": git.stdout.strip() or "?",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stat(pid: int) -> list[str]:
    # Fields after the command name, which may hold spaces and parentheses: state is [0].
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU seconds these processes have used so far."""
    total = 0
    for pid in pids:
        f = _stat(pid)
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


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid`."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int(_stat(int(d.name))[1]) == pid:
                    found.append(int(d.name))
    return found


def descendants(pid: int) -> list[tuple[int, str]]:
    """Every process below `pid`, each with its start time, so that a pid reused later is not hit."""
    out = []
    for child in children(pid):
        with contextlib.suppress(OSError):
            out.append((child, _stat(child)[19]))
            out += descendants(child)
    return out


class Procs:
    """Every process the benchmark starts, each ended when it is done with, or at the end."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.live: list[subprocess.Popen[bytes]] = []
        self.names: dict[int, str] = {}  # pid -> name, which names its log file too

    def start(self, name: str, argv: list[str], cores: list[int]) -> subprocess.Popen[bytes]:
        # A session of its own: Ctrl-C at the terminal reaches this script only, which then
        # ends everything in order (the gateway's workers are relayed signals by their parent).
        with (self.logs / f"{name}.log").open("ab") as out:
            proc = subprocess.Popen(
                ["taskset", "-c", ",".join(map(str, cores)), *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                start_new_session=True,
            )
        self.names[proc.pid] = name
        self.live.append(proc)
        return proc

    def log_tail(self, proc: subprocess.Popen[bytes], lines: int = 20) -> str:
        text = (self.logs / f"{self.names[proc.pid]}.log").read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, proc: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM, wait_s: float = 10) -> None:
        """`sig`, then SIGKILL for it and whatever it started if they outlive `wait_s`."""
        if proc in self.live:
            self.live.remove(proc)
        below = descendants(proc.pid)
        if proc.poll() is None:
            proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(wait_s)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid, started in below:
            with contextlib.suppress(OSError, IndexError):
                if _stat(pid)[19] == started and _stat(pid)[0] != "Z":
                    os.kill(pid, signal.SIGKILL)

    def stop_all(self) -> None:
        for proc in reversed(list(self.live)):
            # The gateway's SIGINT skips the drain delay; everything else ends on SIGTERM.
            self.stop(proc, signal.SIGINT if self.names[proc.pid].startswith("gateway") else signal.SIGTERM)


def wait_listening(procs: Procs, proc: subprocess.Popen[bytes], port: int, path: str | None = None) -> None:
    """Until the port accepts connections (and `path`, if given, answers a GET with 200)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SetupError(f"{procs.names[proc.pid]} exited with {proc.returncode}:\n{procs.log_tail(proc)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            if path is None:
                return
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            if s.recv(64).startswith(b"HTTP/1.1 200"):
                return
        time.sleep(0.05)
    raise SetupError(f"{procs.names[proc.pid]} did not listen on port {port}:\n{procs.log_tail(proc)}")


# ----------------------------------------------------------------------------- answers


def sse_data(body: bytes) -> list[str]:
    return [line[5:].strip().decode() for line in body.splitlines() if line.startswith(b"data:")]


def check_answer(shape: str, stream: bool, status: int, body: bytes, answer: stub.Answer) -> tuple[str, int]:
    """Is this the complete, right answer in the client's dialect? Returns the marker that only a
    complete answer holds and its count of `data:` events, for wrk's check; raises ValueError."""
    if status != 200:
        raise ValueError(f"status {status}: {body[:300]!r}")
    if not stream:
        obj = json.loads(body)
        text = obj["choices"][0]["message"]["content"] if shape == "openai" else obj["generated_text"]
        if text != answer.text:
            raise ValueError(f"the answer's text is {text!r}, not {answer.text!r}")
        return json.dumps(answer.text), 0
    data = sse_data(body)
    want = answer.stream_text
    if shape == "openai":
        if not data or data[-1] != "[DONE]":
            raise ValueError(f"the stream does not end with [DONE]: {body[-300:]!r}")
        chunks = [json.loads(d) for d in data[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        if not any(c["choices"] and c["choices"][0].get("finish_reason") for c in chunks):
            raise ValueError("no chunk has a finish_reason")
        marker = "data: [DONE]"
    else:
        events = [json.loads(d) for d in data]
        last = events[-1] if events else {}
        if last.get("generated_text") != want:
            raise ValueError(f"the last event does not hold the whole text: {body[-300:]!r}")
        if shape == "mindie" and not (last.get("details") or {}).get("finish_reason"):
            raise ValueError(f"the last event has no details.finish_reason: {body[-300:]!r}")
        # MindIE's last event carries its token's text only in generated_text (text null).
        text = "".join(e["token"]["text"] or "" for e in events)
        if shape == "mindie" and want.startswith(text):
            text = want
        marker = json.dumps(want[-40:])[1:]  # the end of generated_text and its closing quote
    if text != want:
        at = next((i for i, (x, y) in enumerate(zip(text, want, strict=False)) if x != y), min(len(text), len(want)))
        raise ValueError(f"the stream's tokens differ from the answer's at character {at}: {text[at : at + 40]!r}")
    return marker, len(data)


@dataclass
class Expect:
    """A checked answer: what every answer under load must hold too."""

    marker: str
    events: int


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with session.post(url, data=json.dumps(body), headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.read()


def check(url: str, client: str, stream: bool, body: dict[str, Any], answer: stub.Answer) -> Expect:
    """One request, answered completely and rightly, before any load; raises ValueError."""

    async def go() -> tuple[int, bytes]:
        async with aiohttp.ClientSession() as session:
            return await _post(session, url, body)

    status, raw = asyncio.run(go())
    marker, events = check_answer(client, stream, status, raw, answer)
    return Expect(marker, events)


def check_stub(port: int) -> None:
    """nginx answers each POST with the answer's own bytes (the 405 redirect trick works)."""

    async def go() -> None:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            for a in stub.ANSWERS.values():
                for path, want in ((a.whole_url_path, a.whole), (a.stream_url_path, a.stream)):
                    status, got = await _post(session, f"http://127.0.0.1:{port}{path}", {})
                    if status != 200 or got != want:
                        raise SetupError(f"the stub answers POST {path} with {status}, {len(got)} bytes")

    asyncio.run(go())


# ----------------------------------------------------------------------------- rows


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


def set_floor(row: Row, refs: list[Row]) -> None:
    """`row`'s floor figures: the mean of its reference runs that did not fail."""
    good = [r for r in refs if not r.failed and r.rps and r.cpu_us_per_req is not None]
    if good:
        row.floor_rps = sum(r.rps for r in good) / len(good)
        row.floor_cpu_us_per_req = sum(r.cpu_us_per_req or 0.0 for r in good) / len(good)
        row.floor_p50_ms = sum(r.p50_ms for r in good) / len(good)


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


class Bench:
    """One run: the processes, the rows measured so far, and the figures made of them."""

    def __init__(self, settings: Settings, tmp: Path, procs: Procs, cores: list[int]) -> None:
        self.s = settings
        self.tmp = tmp
        self.procs = procs
        self.proxy_core = cores[:1]
        self.load_core = cores[1:2] or cores[:1]  # a lone core takes everything
        self.both_cores = cores[:2]
        self.lua = tmp / "post.lua"
        self.lua.write_text(LUA)
        self.rows: list[Row] = []
        self.correctness: list[dict[str, Any]] = []
        self.memory: dict[str, Any] = {}
        self.workers: dict[str, Any] = {}
        self.nginx_port = free_port()
        self.paced_port = free_port()
        self.python = sys.executable

    # --------------------------------------------------------------------- wrk

    def wrk(
        self, url: str, body: dict[str, Any], connections: int, seconds: int, expect: Expect | None
    ) -> dict[str, Any]:
        env = {**os.environ, "BENCH_BODY": json.dumps(body)}
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

    def measure(
        self,
        proxy: str,
        scenario: Scenario,
        kind: str,
        url: str,
        body: dict[str, Any],
        connections: int,
        pids: list[int],
        expect: Expect | None,
        record: bool = True,
        cores: list[int] | None = None,
    ) -> Row:
        """One wrk run of `seconds`, and the CPU the processes `pids` (on `cores`, by default the
        proxy's) spent meanwhile. A scenario whose answer failed its check (`expect` None) is not
        loaded: its row is failed."""
        seconds = self.s.seconds
        row = Row(proxy, scenario.key, scenario.title, kind, connections, seconds, url)
        if expect is None:
            row.failed.append("its answer failed the check before the run: not loaded")
        else:
            self._load(row, body, pids, expect, cores or self.proxy_core)
        if record:
            self.rows.append(row)
        return row

    def _load(self, row: Row, body: dict[str, Any], pids: list[int], expect: Expect, cores: list[int]) -> None:
        kind = row.kind
        cpu0, busy0 = [cpu_seconds([pid]) for pid in pids], cores_busy_seconds(cores)
        w = self.wrk(row.url, body, row.connections, row.seconds, expect)
        cpu1, busy1 = [cpu_seconds([pid]) for pid in pids], cores_busy_seconds(cores)
        wall = w["duration_us"] / 1e6
        row.requests = int(w["requests"])
        row.rps = row.requests / wall
        row.p50_ms, row.p99_ms = w["p50_us"] / 1000, w["p99_us"] / 1000
        row.errors = {k: int(w[k]) for k in ("connect", "read", "write", "status", "timeout") if w[k]}
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

    def checked(
        self, proxy: str, scenario: Scenario, kind: str, url: str, body: dict[str, Any], stream: bool
    ) -> Expect | None:
        """The scenario's answer checked once; None (and recorded) when it is wrong."""
        answer = stub.ANSWERS[scenario.answer]
        entry: dict[str, Any] = {"proxy": proxy, "scenario": scenario.key, "kind": kind, "url": url}
        try:
            expect = check(url, scenario.shape, stream, body, answer)
        except (ValueError, KeyError, IndexError, TypeError, aiohttp.ClientError) as e:
            entry["problem"] = f"{type(e).__name__}: {e}"
            log(f"  {proxy} {scenario.key} {kind}: WRONG ANSWER: {entry['problem']}")
            self.correctness.append(entry)
            return None
        entry |= {"ok": True, "events": expect.events}
        self.correctness.append(entry)
        return expect

    def warm(self, url: str, body: dict[str, Any]) -> None:
        # Connection pools fill, first-call paths run; not in --quick, which has no time to spare.
        if not self.s.quick:
            self.wrk(url, body, self.s.connections, 1, None)

    # --------------------------------------------------------------------- the run

    def run(self) -> None:
        self.start_upstreams()
        self.direct()
        self.floor()
        tokenizer = self.tmp / "tokenizer"
        from tests.tokenizer_kit import build_tokenizer_folder  # imports pytest: only when needed

        build_tokenizer_folder(tokenizer)
        config = self.tmp / "gateway.yaml"
        config.write_text(yaml.safe_dump(self.gateway_config(tokenizer), sort_keys=False))
        verdict = subprocess.run(
            [self.python, "-m", "gateway", "check-config", str(config)], cwd=ROOT, capture_output=True, text=True
        )
        if verdict.returncode != 0:
            raise SetupError(f"the gateway's config is refused:\n{verdict.stdout}{verdict.stderr}")
        self.gateway(config)
        if not self.s.quick:
            self.two_workers(config)

    def start_upstreams(self) -> None:
        nginx = self.procs.start(
            "nginx",
            [nginx_binary() or "nginx", "-c", str(stub.nginx_conf(self.tmp, self.nginx_port))],
            self.load_core,
        )
        wait_listening(self.procs, nginx, self.nginx_port)
        check_stub(self.nginx_port)
        paced = self.procs.start(
            "paced",
            [self.python, "benchmarks/paced.py", str(self.paced_port), str(self.tmp / "www"), str(self.s.paced_gap_ms)],
            self.load_core,
        )
        wait_listening(self.procs, paced, self.paced_port)

    def baseline_rows(self, proxy: str, base: str, pids: list[int]) -> None:
        """JSON, stream and one-connection rows of the OpenAI chat answer at the stub's paths."""
        sc = BASELINE
        for kind, path, body, stream in (
            ("json", sc.json_path, sc.json_body, False),
            ("stream", sc.stream_path, sc.stream_body, True),
        ):
            expect = self.checked(proxy, sc, kind, base + path, body, stream)
            if expect is not None and pids:
                self.warm(base + path, body)
            self.measure(proxy, sc, kind, base + path, body, self.s.connections, pids, expect)
        expect = self.checked(proxy, sc, "latency", base + sc.json_path, sc.json_body, False)
        self.measure(proxy, sc, "latency", base + sc.json_path, sc.json_body, 1, pids, expect)

    def direct(self) -> None:
        log("direct to the stub (nginx):")
        self.baseline_rows("direct", f"http://127.0.0.1:{self.nginx_port}", [])

    def floor(self) -> None:
        log("the aiohttp floor:")
        port = free_port()
        floor = self.procs.start(
            "floor",
            [self.python, "benchmarks/floor.py", str(port), f"http://127.0.0.1:{self.nginx_port}"],
            self.proxy_core,
        )
        try:
            wait_listening(self.procs, floor, port)
            self.baseline_rows("floor", f"http://127.0.0.1:{port}", [floor.pid])
        finally:
            self.procs.stop(floor)
        # The paced upstream behind a floor of its own: one proxy loaded at a time.
        port = free_port()
        floor = self.procs.start(
            "floor-paced",
            [self.python, "benchmarks/floor.py", str(port), f"http://127.0.0.1:{self.paced_port}"],
            self.proxy_core,
        )
        try:
            wait_listening(self.procs, floor, port)
            url = f"http://127.0.0.1:{port}{BASELINE.stream_path}"
            expect = self.checked("floor", BASELINE, "paced", url, BASELINE.stream_body, True)
            self.measure(
                "floor", BASELINE, "paced", url, BASELINE.stream_body, self.s.paced_connections, [floor.pid], expect
            )
        finally:
            self.procs.stop(floor)

    def gateway_config(self, tokenizer: Path) -> dict[str, Any]:
        """Routes by prefix: /json/KEY, /stream/KEY and /paced/KEY, each on its own backend, whose
        url picks whole answers, streams, or the paced streams. The limits' defaults (1024
        requests in flight, 256 connections per backend) do not hold 64 connections back."""
        upstreams = {
            "json": f"http://127.0.0.1:{self.nginx_port}",
            "stream": f"http://127.0.0.1:{self.nginx_port}/stream",
            "paced": f"http://127.0.0.1:{self.paced_port}/stream",
        }
        backends: dict[str, Any] = {}
        routes = []
        for variant, scenarios in (("json", SCENARIOS), ("stream", SCENARIOS), ("paced", PACED)):
            for sc in scenarios:
                name = f"{sc.backend}-{variant}"
                base, settings = BACKENDS[sc.backend]
                backend = {"dialect": sc.backend, "url": upstreams[variant] + base, **settings}
                if sc.backend == "triton":
                    backend["tokenizer"] = str(tokenizer)  # chat reaches Triton through the chat template
                backends[name] = backend
                routes.append(
                    {
                        "name": f"{sc.key}-{variant}",
                        "dialect": sc.dialect,
                        "backend": name,
                        "prefix": f"/{variant}/{sc.key}",
                    }
                )
        return {
            "listen": {"host": "127.0.0.1", "port": 0},
            # No access log: the floor writes none either; what logging costs is the deployment's choice.
            "logging": {"access_log": False},
            # Stopping must not wait: nothing is in flight when the benchmark stops the gateway.
            "shutdown": {"drain_delay_s": 0, "grace_s": 1},
            "backends": backends,
            "routes": routes,
        }

    def gateway_rows(
        self,
        base: str,
        pids: list[int],
        floor: tuple[str, int] | None = None,
        paced_floor: tuple[str, int] | None = None,
    ) -> None:
        """Every scenario's rows; with `floor` (its base URL and pid), each JSON and stream row
        the median of its rounds, each between two floor runs of the same kind (`rounds`); with
        `paced_floor` (a floor in front of the paced upstream), likewise each paced row."""
        refs: dict[str, tuple[str, dict[str, Any], Expect | None]] = {}
        if floor is not None:
            fb, answer = BASELINE, stub.ANSWERS[BASELINE.answer]
            for kind, path, body, stream in (
                ("json", fb.json_path, fb.json_body, False),
                ("stream", fb.stream_path, fb.stream_body, True),
            ):
                refs[kind] = (floor[0] + path, body, check(floor[0] + path, fb.shape, stream, body, answer))
            refs["latency"] = refs["json"]
        for sc in SCENARIOS:
            for kind, path, body, stream in (
                ("json", sc.json_path, sc.json_body, False),
                ("stream", sc.stream_path, sc.stream_body, True),
            ):
                url = f"{base}/{kind}/{sc.key}{path}"
                expect = self.checked("gateway", sc, kind, url, body, stream)
                if expect is not None:
                    self.warm(url, body)
                n = self.s.connections
                self.rows.append(
                    self.rounds(
                        partial(self.measure, "gateway", sc, kind, url, body, n, pids, expect, record=False),
                        None if floor is None else partial(self.floor_ref, floor[1], kind, refs[kind], n),
                    )
                )
            url = f"{base}/json/{sc.key}{sc.json_path}"
            expect = self.checked("gateway", sc, "latency", url, sc.json_body, False)
            self.rows.append(
                self.rounds(
                    partial(self.measure, "gateway", sc, "latency", url, sc.json_body, 1, pids, expect, record=False),
                    None if floor is None else partial(self.floor_ref, floor[1], "latency", refs["latency"], 1),
                    by="p50",
                )
            )
        paced_ref = None
        if paced_floor is not None:
            furl = paced_floor[0] + BASELINE.stream_path
            paced_ref = (
                furl,
                BASELINE.stream_body,
                self.checked("floor", BASELINE, "paced", furl, BASELINE.stream_body, True),
            )
        for sc in PACED:
            url = f"{base}/paced/{sc.key}{sc.stream_path}"
            expect = self.checked("gateway", sc, "paced", url, sc.stream_body, True)
            n = self.s.paced_connections
            self.rows.append(
                self.rounds(
                    partial(self.measure, "gateway", sc, "paced", url, sc.stream_body, n, pids, expect, record=False),
                    None
                    if paced_floor is None or paced_ref is None
                    else partial(self.floor_ref, paced_floor[1], "paced", paced_ref, n),
                    by="cpu",
                )
            )

    def rounds(self, gateway: Callable[[], Row], floor: Callable[[], Row] | None, by: str = "rps") -> Row:
        """A gateway row from `Settings.rounds` runs, each between two floor runs (the one after
        a round is the one before the next): the round whose ratio to the mean of its two floor
        runs is the median, with every round's ratio. The machine's speed drifts over seconds as
        well as minutes, and a median of interleaved rounds holds where one pair does not. A
        round that failed fails the row. `by`: the figure the ratio is of, requests/s, or CPU per
        request or p50 (for those, less is better and the ratio is the gateway's over the floor's)."""
        if floor is None:
            return gateway()
        done: list[Row] = []
        before = floor()
        for _ in range(self.s.rounds):
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

    def floor_ref(self, pid: int, kind: str, ref: tuple[str, dict[str, Any], Expect | None], connections: int) -> Row:
        """A floor run to compare a gateway row with, not a row of the tables itself."""
        url, body, expect = ref
        return self.measure("floor", BASELINE, kind, url, body, connections, [pid], expect, record=False)

    def start_gateway(
        self, name: str, config: Path, workers: int, cores: list[int]
    ) -> tuple[subprocess.Popen[bytes], int]:
        port = free_port()
        argv = [self.python, "-m", "gateway", "serve", "--config", str(config), "--port", str(port)]
        gw = self.procs.start(name, [*argv, "--workers", str(workers)], cores)
        # "listening on" is logged once every worker is up; /healthz then answers.
        deadline = time.monotonic() + 60
        while "listening on" not in (self.tmp / f"{name}.log").read_text(errors="replace"):
            if gw.poll() is not None or time.monotonic() > deadline:
                raise SetupError(f"{name} did not start:\n{self.procs.log_tail(gw)}")
            time.sleep(0.05)
        wait_listening(self.procs, gw, port, "/healthz")
        return gw, port

    def gateway(self, config: Path) -> None:
        log(f"the gateway, one worker ({self.s.rounds} round(s) a row, each between floor runs):")
        gw, port = self.start_gateway("gateway", config, 1, self.proxy_core)
        # The floor again, idle on the same core but for its reference runs.
        fport = free_port()
        floor = self.procs.start(
            "floor-ref",
            [self.python, "benchmarks/floor.py", str(fport), f"http://127.0.0.1:{self.nginx_port}"],
            self.proxy_core,
        )
        pport = free_port()
        paced = self.procs.start(
            "floor-paced-ref",
            [self.python, "benchmarks/floor.py", str(pport), f"http://127.0.0.1:{self.paced_port}"],
            self.proxy_core,
        )
        try:
            wait_listening(self.procs, floor, fport)
            wait_listening(self.procs, paced, pport)
            self.memory["idle"] = memory_mib(gw.pid)
            base = f"http://127.0.0.1:{port}"
            refs = (f"http://127.0.0.1:{fport}", floor.pid), (f"http://127.0.0.1:{pport}", paced.pid)
            self.gateway_rows(base, [gw.pid], *refs)
            self.procs.stop(floor)
            self.procs.stop(paced)
            if not self.s.quick:
                self.soak(gw.pid, base)
            log(f"  gateway's log:\n{self.procs.log_tail(gw, 5)}")
        finally:
            self.procs.stop(floor)
            self.procs.stop(paced)
            self.procs.stop(gw, signal.SIGINT)

    def soak(self, pid: int, base: str) -> None:
        """JSON requests, every scenario in turn, until soak_requests are answered; RSS after each
        run, to see that it stays flat. What came before (every scenario's runs) is the warm-up."""
        log(f"  memory soak: {self.s.soak_requests:,} JSON requests")
        good = [sc for sc in SCENARIOS if self.good("gateway", sc.key, "json")]
        before = memory_mib(pid)
        total, errors = 0, 0
        series: list[dict[str, float]] = []
        while good and total < self.s.soak_requests:
            sc = good[len(series) % len(good)]
            w = self.wrk(f"{base}/json/{sc.key}{sc.json_path}", sc.json_body, self.s.connections, self.s.seconds, None)
            total += int(w["requests"])
            errors += sum(int(w[k]) for k in ("connect", "read", "write", "status", "timeout"))
            series.append({"requests": total, "VmRSS": memory_mib(pid)["VmRSS"]})
        after = memory_mib(pid)
        self.memory |= {
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
        one, port1 = self.start_gateway("gateway-one", config, 1, self.proxy_core)
        two, port2 = self.start_gateway("gateway-workers", config, 2, self.both_cores)
        try:
            # The workers are the parent's children started by multiprocessing's spawn (not its
            # resource tracker); their CPU is what serves requests.
            pids = [pid for pid in children(two.pid) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
            for pid, core in zip(pids, self.both_cores, strict=False):
                os.sched_setaffinity(pid, {core})
            sc, n = PASS_THROUGH, self.s.connections
            url1, url2 = (f"http://127.0.0.1:{p}/json/{sc.key}{sc.json_path}" for p in (port1, port2))
            expect1 = self.checked("gateway", sc, "workers", url1, sc.json_body, False)
            expect2 = self.checked("gateway-2", sc, "workers", url2, sc.json_body, False)
            for url, expect in ((url1, expect1), (url2, expect2)):
                if expect is not None:
                    self.warm(url, sc.json_body)
            singles: list[Row] = []

            def single() -> Row:
                singles.append(self.measure("gateway", sc, "workers", url1, sc.json_body, n, [one.pid], expect1, False))
                return singles[-1]

            row = self.rounds(
                partial(
                    self.measure,
                    "gateway-2",
                    sc,
                    "workers",
                    url2,
                    sc.json_body,
                    n,
                    pids,
                    expect2,
                    False,
                    self.both_cores,
                ),
                single,
            )
            failed = [f for s in singles for f in s.failed]
            self.workers = {
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
            self.procs.stop(one, signal.SIGINT)
            self.procs.stop(two, signal.SIGINT, wait_s=15)

    # --------------------------------------------------------------------- figures

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

    def targets(self) -> list[dict[str, Any]]:
        """The issue's targets, each with what this run measured; never adjusted."""
        out: list[dict[str, Any]] = []

        def add(target: str, value: float | None, met: bool | None, measured: str) -> None:
            out.append({"target": target, "value": value, "met": met, "measured": measured})

        def worst(
            target: str, kind: str, translating: bool, bound: float, figure: Callable[[Row], float | None]
        ) -> None:
            """The worst gateway scenario of the kind against the bound (a ratio floor, or a
            ceiling in ms for the added latency)."""
            scenarios = [sc for sc in SCENARIOS if sc.translating == translating]
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
            ("JSON pass-through >= 0.85x floor req/s", "json", False, 0.85),
            ("JSON translating >= 0.75x floor req/s", "json", True, 0.75),
            ("Streams pass-through >= 0.6x floor streams/s", "stream", False, 0.6),
            ("Streams translating >= 0.35x floor streams/s", "stream", True, 0.35),
        ):
            worst(target, kind, translating, bound, lambda r: r.vs_floor.get("rps"))
        floor_paced = self.good("floor", BASELINE.key, "paced")
        gw_paced = self.good("gateway", PACED[1].key, "paced")
        target = "Paced: CPU per translated event <= 2x floor's per relayed event"
        if floor_paced and gw_paced and floor_paced.cpu_us_per_event and gw_paced.cpu_us_per_event:
            # Against the floor's paced runs on either side of the gateway's, when there were some.
            floor_us = floor_paced.cpu_us_per_event
            if gw_paced.floor_cpu_us_per_req:
                floor_us = gw_paced.floor_cpu_us_per_req / EVENTS
            v = gw_paced.cpu_us_per_event / floor_us
            add(target, v, v <= 2, f"{v:.2f}x ({gw_paced.cpu_us_per_event:.1f} vs {floor_us:.1f} us)")
        else:
            add(target, None, False, "not measured")
        for translating, which in ((False, "pass-through"), (True, "translating")):
            target = f"Added p50 at 1 connection <= 0.35 ms (JSON, {which})"
            worst(target, "latency", translating, 0.35, lambda r: r.added_p50_ms)
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
            add(target, None, None, "not measured (--quick)" if self.s.quick else "failed")
        return out

    def failures(self) -> list[str]:
        out = [f"{r.proxy} {r.scenario} {r.kind}: {'; '.join(r.failed)}" for r in self.rows if r.failed]
        out += [f"{c['proxy']} {c['scenario']} {c['kind']}: {c['problem']}" for c in self.correctness if "problem" in c]
        for name in ("one", "two"):
            if self.workers.get(name, {}).get("failed"):
                out.append(f"workers {name}: {'; '.join(self.workers[name]['failed'])}")
        if self.memory.get("soak_errors"):
            out.append(f"memory soak: {self.memory['soak_errors']} requests failed")
        return out


# ----------------------------------------------------------------------------- output


def _n(v: float | None, fmt: str = ",.0f") -> str:
    return "-" if v is None else format(v, fmt)


def _x(ratios: dict[str, float], key: str) -> str:
    return f"{ratios[key]:.2f}x" if key in ratios else "-"


def markdown(bench: Bench, info: dict[str, Any], command: str) -> str:
    """The run as markdown: machine and command, then one table per measurement."""
    s = bench.s
    out = [
        f"{info['date']}; {info['arch']}, {info['cpu']}, {info['nproc']} cores, Linux {info['kernel']}; Python "
        f"{info['python']}, aiohttp {info['aiohttp']}, {info['wrk']}, nginx {info['nginx']}; gateway at {info['git']}.",
        f"Command: `{command}`. Proxy on core {bench.proxy_core[0]}; nginx, wrk and the paced upstream on core "
        f"{bench.load_core[0]}. {s.seconds} s per run; wrk -t1. Each gateway JSON, stream, paced and one-connection "
        f"row is the median of {s.rounds} round(s), each against the floor runs just before and after it.",
        "",
        f"| {s.connections} connections | JSON req/s | x floor | x direct | CPU us/req "
        f"| {s.stream_events}-event streams/s | x floor | x direct | CPU us/event |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    named = [("direct", BASELINE, "direct to nginx"), ("floor", BASELINE, "aiohttp floor")]
    named += [("gateway", sc, sc.title) for sc in SCENARIOS]
    for proxy, sc, title in named:
        j, st = bench.find(proxy, sc.key, "json"), bench.find(proxy, sc.key, "stream")
        cells = [title]
        for row, cpu in ((j, "cpu_us_per_req"), (st, "cpu_us_per_event")):
            if row is None or row.failed:
                cells += ["FAILED", "", "", ""]
            else:
                digits = ",.0f" if cpu == "cpu_us_per_req" else ".2f"
                cells += [_n(row.rps), _x(row.vs_floor, "rps"), _x(row.vs_direct, "rps"), _n(getattr(row, cpu), digits)]
        out.append("| " + " | ".join(cells) + " |")
    out += [
        "",
        "| 1 connection, JSON | p50 ms | p99 ms | added p50 ms | the floor's added p50 beside it, ms |",
        "|---|---:|---:|---:|---:|",
    ]
    direct = bench.good("direct", BASELINE.key, "latency")
    for proxy, sc, title in named:
        row = bench.find(proxy, sc.key, "latency")
        if row is None or row.failed:
            out.append(f"| {title} | FAILED | | | |")
        else:
            beside = row.floor_p50_ms - direct.p50_ms if row.floor_p50_ms and direct else None
            cells = [f"{row.p50_ms:.3f}", f"{row.p99_ms:.3f}", _n(row.added_p50_ms, "+.3f"), _n(beside, "+.3f")]
            out.append(f"| {title} | " + " | ".join(cells) + " |")
    out += [
        "",
        f"| paced streams: {s.paced_connections} connections, {s.paced_gap_ms:g} ms between events "
        "| streams/s | events/s | CPU us/event | x floor CPU/event |",
        "|---|---:|---:|---:|---:|",
    ]
    for proxy, sc, title in [("floor", BASELINE, "aiohttp floor")] + [("gateway", sc, sc.title) for sc in PACED]:
        row = bench.find(proxy, sc.key, "paced")
        if row is None or row.failed:
            out.append(f"| {title} | FAILED | | | |")
        else:
            cells = [
                _n(row.rps),
                _n(row.events_per_s),
                _n(row.cpu_us_per_event, ".2f"),
                _x(row.vs_floor, "cpu_per_req"),
            ]
            out.append(f"| {title} | " + " | ".join(cells) + " |")
    mem = bench.memory
    if mem.get("idle"):
        out += ["", f"Gateway memory: idle after start VmRSS {mem['idle']['VmRSS']:.1f} MiB."]
        if "after_soak" in mem:
            before, after = mem["before_soak"], mem["after_soak"]
            out[-1] += (
                f" After the scenarios (warm) {before['VmRSS']:.1f} MiB; after {mem['soak_requests']:,} more"
                f" JSON requests {after['VmRSS']:.1f} MiB ({mem['growth_mib']:+.1f} MiB);"
                f" peak (VmHWM) {after['VmHWM']:.1f} MiB."
            )
    one, two = bench.workers.get("one"), bench.workers.get("two")
    if one and two:
        each = " + ".join(f"{c:.2f}" for c in two["cpu_s_each"])
        cores = bench.both_cores
        out += [
            "",
            f"| JSON pass-through, {s.connections} connections | req/s | req per gateway CPU second "
            "| gateway CPU s (per worker) |",
            "|---|---:|---:|---:|",
            f"| 1 worker (core {bench.proxy_core[0]}; the runs either side of the median round) "
            f"| {_n(one['rps'])} | {_n(one['req_per_cpu_s'])} | - |",
            f"| 2 workers (one on core {cores[0]}, one on core {cores[-1]} with nginx and wrk) "
            f"| {_n(two['rps'])} | {_n(two['req_per_cpu_s'])} | {each} |",
        ]
    # On a shared machine other work may take the proxy's core: say where it did.
    disturbed = [r for r in bench.rows if r.others_busy is not None and r.others_busy > 0.1]
    if disturbed:
        worst = max(disturbed, key=lambda r: r.others_busy or 0.0)
        out += [
            "",
            f"Other processes used more than 0.1 of the proxy's core in {len(disturbed)} of "
            f"{len(bench.rows)} runs (at most {worst.others_busy:.2f}, {worst.proxy} {worst.scenario} {worst.kind}); "
            "their requests/s are low by as much, CPU per request is not. `others_busy` in the JSON has each.",
        ]
    out += ["", "| target | measured | met |", "|---|---|---|"]
    for t in bench.targets():
        met = {True: "yes", False: "**no**", None: "-"}[t["met"]]
        out.append(f"| {t['target']} | {t['measured']} | {met} |")
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Direct to the stub, the aiohttp floor and the gateway, measured with wrk in one run.",
    )
    ap.add_argument("--seconds", type=int, help="seconds per wrk run (default 5; 1 with --quick)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="1-second runs, 16 connections, wrk checks every answer; "
        "no memory soak and no workers run; results to a temporary file unless --out",
    )
    ap.add_argument("--out", type=Path, help=f"results JSON (default {RESULTS.relative_to(ROOT)})")
    ap.add_argument("--connections", type=int, help="connections for the JSON and stream runs (default 64; 16 quick)")
    ap.add_argument("--paced-connections", type=int, help="connections for paced streams (default 16; 8 quick)")
    ap.add_argument("--paced-gap-ms", type=float, default=1.0, help="gap between paced events (default 1)")
    ap.add_argument("--soak-requests", type=int, default=100_000, help="JSON requests for the memory soak")
    ap.add_argument(
        "--rounds",
        type=int,
        help="gateway runs per JSON, stream and paced row, each between floor runs; the row is the "
        "median round (default 3; 1 with --quick)",
    )
    return ap.parse_args(argv)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quick = args.quick
    settings = Settings(
        seconds=args.seconds or (1 if quick else 5),
        connections=args.connections or (16 if quick else 64),
        paced_connections=args.paced_connections or (8 if quick else 16),
        paced_gap_ms=args.paced_gap_ms,
        soak_requests=args.soak_requests,
        quick=quick,
        rounds=args.rounds or (1 if quick else 3),
    )
    out = args.out or (Path(tempfile.gettempdir()) / "gateway-benchmark-quick.json" if quick else RESULTS)
    command = " ".join([".venv/bin/python -m benchmarks.run", *(sys.argv[1:] if argv is None else argv)])
    # SIGTERM ends the run as Ctrl-C does: through the finally that stops every process. SIGINT
    # is set too, since a shell starting this in the background leaves it ignored.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ensure_tools()
    except ToolsMissing as e:
        log(f"cannot run the benchmark: {e}")
        return EXIT_NO_TOOLS
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        log("only one core: the proxy shares it with nginx and wrk, and the figures say little")
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:
        # Started by root, nginx's worker runs as nobody, and must read the stub's files.
        os.chmod(tmp, 0o755)
        procs = Procs(Path(tmp))
        bench = Bench(settings, Path(tmp), procs, cores)
        # This script (correctness checks, /proc reads) stays off the proxy's core.
        os.sched_setaffinity(0, set(bench.load_core))
        try:
            bench.run()
        except SetupError as e:
            log(f"setup failed: {e}")
            nginx_log = Path(tmp) / "nginx-error.log"
            if nginx_log.exists() and nginx_log.read_text().strip():
                log(f"nginx's error log:\n{nginx_log.read_text()[-2000:]}")
            return EXIT_SETUP
        except KeyboardInterrupt:
            log("interrupted: stopping what was started")
            return 130
        finally:
            procs.stop_all()
        nginx_errors = (Path(tmp) / "nginx-error.log").read_text(errors="replace")
    bench.ratios()
    info = machine()
    failures = bench.failures()
    results = {
        "machine": info,
        "command": command,
        "settings": asdict(settings),
        "placement": {
            "proxy": f"core {bench.proxy_core[0]}: the floor or the gateway (one process), one at a time",
            "load": f"core {bench.load_core[0]}: nginx, wrk -t1, the paced upstream, this script",
            "workers": f"cores {','.join(map(str, bench.both_cores))}: the gateway's two workers, one pinned to "
            f"each; nginx and wrk stay on core {bench.load_core[0]}, so the second worker shares it with them",
        },
        "rows": [asdict(r) for r in bench.rows],
        "correctness": bench.correctness,
        "memory": bench.memory,
        "workers": bench.workers,
        "targets": bench.targets(),
        "nginx_errors": nginx_errors.strip().splitlines()[-20:],
        "failures": failures,
        "ok": not failures,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(markdown(bench, info, command))
    log(f"results: {out}")
    if failures:
        log("FAILED:\n  " + "\n  ".join(failures))
        return EXIT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
