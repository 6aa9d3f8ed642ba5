"""Process control: the tools the benchmark needs, and every process it starts, each pinned to
its cores with taskset and ended when it is done with, or when the run stops, fails or is
interrupted (whatever those processes started included).

Placement is the run's (benchmarks.suite); this module only starts what it is told where it is
told, waits until it listens, and stops it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
STARTUP_S = 60.0


class SetupError(Exception):
    """The benchmark could not be set up: nothing was measured."""


class ToolsMissing(SetupError):
    """wrk or nginx is missing and could not be installed."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (which may hold spaces and parentheses):
    the state is [0], the parent [1], utime and stime [11] and [12], the start time [19]."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid`."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int(stat_fields(int(d.name))[1]) == pid:
                    found.append(int(d.name))
    return found


def descendants(pid: int) -> list[tuple[int, str]]:
    """Every process below `pid`, each with its start time, so that a pid reused later is not hit."""
    out = []
    for child in children(pid):
        with contextlib.suppress(OSError):
            out.append((child, stat_fields(child)[19]))
            out += descendants(child)
    return out


Proc = subprocess.Popen[bytes]


@dataclass(frozen=True)
class Serving:
    """A started process that listens on a port of the loopback."""

    proc: Proc
    port: int

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Procs:
    """Every process the benchmark starts, each ended when it is done with, or at the end."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.live: list[Proc] = []
        self.names: dict[int, str] = {}  # pid -> name, which names its log file too

    def start(self, name: str, argv: list[str], cores: list[int], env: dict[str, str] | None = None) -> Proc:
        # A session of its own: Ctrl-C at the terminal reaches this script only, which then
        # ends everything in order (the gateway's workers are relayed signals by their parent).
        with self.log_path(name).open("ab") as out:
            proc = subprocess.Popen(
                ["taskset", "-c", ",".join(map(str, cores)), *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                env=env,
                start_new_session=True,
            )
        self.names[proc.pid] = name
        self.live.append(proc)
        return proc

    def log_path(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def log_tail(self, proc: Proc, lines: int = 20) -> str:
        text = self.log_path(self.names[proc.pid]).read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, proc: Proc, sig: signal.Signals = signal.SIGTERM, wait_s: float = 10) -> None:
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
                if stat_fields(pid)[19] == started and stat_fields(pid)[0] != "Z":
                    os.kill(pid, signal.SIGKILL)

    def stop_all(self) -> None:
        for proc in reversed(list(self.live)):
            # The gateway's SIGINT skips the drain delay; everything else ends on SIGTERM.
            self.stop(proc, signal.SIGINT if self.names[proc.pid].startswith("gateway") else signal.SIGTERM)

    @contextlib.contextmanager
    def running(self, name: str, argv: list[str], cores: list[int], port: int) -> Iterator[Serving]:
        """A process for the length of the block, listening on `port` when the block starts."""
        proc = self.start(name, argv, cores)
        try:
            self.wait_listening(proc, port)
            yield Serving(proc, port)
        finally:
            self.stop(proc)

    def wait_listening(self, proc: Proc, port: int, path: str | None = None) -> None:
        """Until the port accepts connections (and `path`, if given, answers a GET with 200)."""
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SetupError(f"{self.names[proc.pid]} exited with {proc.returncode}:\n{self.log_tail(proc)}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if path is None:
                    return
                s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return
            time.sleep(0.05)
        raise SetupError(f"{self.names[proc.pid]} did not listen on port {port}:\n{self.log_tail(proc)}")

    # The processes the run measures or loads through.

    def nginx(self, conf: Path, port: int, cores: list[int]) -> Proc:
        proc = self.start("nginx", [nginx_binary() or "nginx", "-c", str(conf)], cores)
        self.wait_listening(proc, port)
        return proc

    def paced(self, port: int, www: Path, gap_ms: float, cores: list[int]) -> Proc:
        proc = self.start("paced", [PYTHON, "benchmarks/paced.py", str(port), str(www), str(gap_ms)], cores)
        self.wait_listening(proc, port)
        return proc

    def floor(self, name: str, upstream_port: int, cores: list[int]) -> AbstractContextManager[Serving]:
        """The aiohttp floor in front of the upstream on `upstream_port`, for the block."""
        port = free_port()
        argv = [PYTHON, "benchmarks/floor.py", str(port), f"http://127.0.0.1:{upstream_port}"]
        return self.running(name, argv, cores, port)

    def gateway(self, name: str, config: Path, workers: int, cores: list[int]) -> Serving:
        """`gateway serve` with `workers` worker processes on `cores`, once every worker is up
        ("listening on" is logged then) and /healthz answers."""
        port = free_port()
        argv = [PYTHON, "-m", "gateway", "serve", "--config", str(config), "--port", str(port)]
        gw = self.start(name, [*argv, "--workers", str(workers)], cores)
        deadline = time.monotonic() + STARTUP_S
        while "listening on" not in self.log_path(name).read_text(errors="replace"):
            if gw.poll() is not None or time.monotonic() > deadline:
                raise SetupError(f"{name} did not start:\n{self.log_tail(gw)}")
            time.sleep(0.05)
        self.wait_listening(gw, port, "/healthz")
        return Serving(gw, port)


def check_config(config: Path) -> None:
    """The gateway's own verdict on a configuration the run wrote; SetupError if refused."""
    verdict = subprocess.run(
        [PYTHON, "-m", "gateway", "check-config", str(config)], cwd=ROOT, capture_output=True, text=True
    )
    if verdict.returncode != 0:
        raise SetupError(f"the gateway's config is refused:\n{verdict.stdout}{verdict.stderr}")


def pin_workers(parent: int, cores: list[int]) -> list[int]:
    """The worker processes of `gateway serve --workers N` (its children started by
    multiprocessing's spawn, not its resource tracker), each pinned to a core of `cores` in turn."""
    pids = [pid for pid in children(parent) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    for pid, core in zip(pids, cores, strict=False):
        os.sched_setaffinity(pid, {core})
    return pids
