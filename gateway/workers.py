"""`gateway serve --workers N`: N processes, each with its own event loop, sharing one port.

Every worker binds the same address with SO_REUSEPORT, so the kernel spreads connections among
them. Before the workers start, the parent points PROMETHEUS_MULTIPROC_DIR at an empty folder
(a fresh temporary one unless the variable is already set): prometheus-client in each worker
then writes its values there, and any worker's /metrics aggregates all of them. When a worker
exits, the parent marks it dead (its live in-flight gauge drops out of the sum) and starts a
replacement; SIGTERM or SIGINT stops them all and removes the temporary folder.
"""

import contextlib
import glob
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from types import FrameType
from typing import Any

from prometheus_client import multiprocess

from gateway.config import Config
from gateway.metrics import MULTIPROC_ENV

log = logging.getLogger("gateway")
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
# A worker that dies within this long of starting is not restarted in a loop.
MIN_UPTIME_S = 5.0


def _worker(config: Config, host: str, port: int, log_format: str, log_level: str, ready: "Queue[int]") -> None:
    from gateway import logs
    from gateway.app import create_app
    from gateway.server import listen_ssl, run_loop, serve

    logs.setup(log_format, log_level)
    try:
        app = create_app(config)
        run_loop(serve(app, host, port, config.limits, listen_ssl(config), reuse_port=True, on_ready=ready.put))
    except OSError as e:
        print(f"worker {os.getpid()}: cannot listen on {host}:{port}: {e.strerror}", file=sys.stderr)
        raise SystemExit(1) from None


def _mark_dead(pid: int, path: str) -> None:
    multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]


def _reserve_port(host: str) -> socket.socket:
    """A socket bound to a free port with SO_REUSEPORT, held so the workers can share that port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host, 0))
    return s


def _prepare_dir() -> tuple[str, bool]:
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        os.makedirs(given, exist_ok=True)
        # Values left by an earlier run would be summed with this one's.
        for f in glob.glob(os.path.join(given, "*.db")):
            os.remove(f)
        return given, False
    path = tempfile.mkdtemp(prefix="gateway-metrics-")
    os.environ[MULTIPROC_ENV] = path
    return path, True


def serve_workers(config: Config, host: str, port: int, workers: int, log_format: str, log_level: str) -> int:
    path, owned = _prepare_dir()
    held = _reserve_port(host) if port == 0 else None
    if held is not None:
        port = held.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    ready: Queue[int] = ctx.Queue()
    procs: dict[int, BaseProcess] = {}
    started: dict[int, float] = {}

    def start(slot: int) -> None:
        p = ctx.Process(
            target=_worker,
            args=(config, host, port, log_format, log_level, ready),
            name=f"gateway-worker-{slot}",
            daemon=False,
        )
        p.start()
        procs[slot] = p
        started[slot] = time.monotonic()

    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    code = 0
    try:
        for slot in range(workers):
            start(slot)
        if not _await_ready(ready, procs, workers, lambda: stopping):
            code = 1
        else:
            scheme = "https" if config.listen.tls else "http"
            log.info("listening on %s://%s:%s (%d workers, metrics in %s)", scheme, host, port, workers, path)
            code = _supervise(procs, started, start, path, lambda: stopping)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _stop_all(procs, path)
        ready.close()
        if held is not None:
            held.close()
        if owned:
            shutil.rmtree(path, ignore_errors=True)
            os.environ.pop(MULTIPROC_ENV, None)
    return code


def _await_ready(ready: "Queue[int]", procs: dict[int, BaseProcess], n: int, stopping: Any) -> bool:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    count = 0
    while count < n:
        if stopping() or time.monotonic() > deadline:
            return False
        if any(p.exitcode is not None for p in procs.values()):
            print("a worker failed to start", file=sys.stderr)
            return False
        with contextlib.suppress(Exception):
            ready.get(timeout=0.2)
            count += 1
    return True


def _supervise(procs: dict[int, BaseProcess], started: dict[int, float], start: Any, path: str, stopping: Any) -> int:
    while not stopping():
        wait([p.sentinel for p in procs.values()], timeout=0.5)
        for slot, p in list(procs.items()):
            if p.exitcode is None:
                continue
            if p.pid is not None:
                _mark_dead(p.pid, path)
            if stopping():
                break
            if time.monotonic() - started[slot] < MIN_UPTIME_S:
                print(f"worker {p.pid} exited with {p.exitcode} right after starting; stopping", file=sys.stderr)
                return 1
            log.warning("worker %s exited with %s; starting another", p.pid, p.exitcode)
            start(slot)
    return 0


def _stop_all(procs: dict[int, BaseProcess], path: str) -> None:
    for p in procs.values():
        if p.exitcode is None and p.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for p in procs.values():
        p.join(max(deadline - time.monotonic(), 0.1))
        if p.exitcode is None:
            p.kill()
            p.join()
        if p.pid is not None:
            _mark_dead(p.pid, path)
