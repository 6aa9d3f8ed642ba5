"""`gateway serve --workers N`: N processes, each with its own event loop, sharing one port.

Every worker binds the same address with SO_REUSEPORT, so the kernel spreads connections among
them. Before the workers start, the parent points PROMETHEUS_MULTIPROC_DIR at an empty folder
(a fresh temporary one unless the variable is already set): prometheus-client in each worker
then writes its values there, and any worker's /metrics aggregates all of them. When a worker
exits, the parent marks it dead (its live in-flight gauge drops out of the sum) and starts a
replacement.

Signals are the parent's to receive and relay. SIGTERM and SIGINT go on to every worker, each of
which drains (gateway.lifecycle); the parent waits as long as a drain may take (`stop_budget`)
before it kills what is left, then removes the temporary folder. On SIGHUP (or a change that
`--watch-config` sees) the parent reads and checks the configuration file once, reports its
problems once, and sends each worker, over a pipe, either the checked configuration to go live or
word of the rejection to count. The workers sit in a process group of their own, so that Ctrl-C
at a terminal reaches the parent only; a worker whose parent is gone (its pipe closes) stops.
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
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from types import FrameType
from typing import Any

from prometheus_client import multiprocess

from gateway.config import ConfigError, Shutdown
from gateway.lifecycle import LOAD, REJECTED, WATCH_INTERVAL_S
from gateway.metrics import MULTIPROC_ENV
from gateway.reload import ConfigSource, Loaded

log = logging.getLogger("gateway")
STARTUP_TIMEOUT_S = 60.0
# Beyond the workers' drain delay and grace period: time to end streams and clean up.
STOP_MARGIN_S = 5.0
# A worker that dies within this long of starting is not restarted in a loop.
MIN_UPTIME_S = 5.0


def stop_budget(shutdown: Shutdown, sig: signal.Signals) -> float:
    """How long the parent waits for its workers after relaying `sig`: their drain delay (SIGTERM
    only), their grace period, and a margin. An orchestrator's own deadline (Kubernetes'
    terminationGracePeriodSeconds) must be at least the SIGTERM budget."""
    delay = shutdown.drain_delay_s if sig is signal.SIGTERM else 0.0
    return delay + shutdown.grace_s + STOP_MARGIN_S


def _worker(
    source: ConfigSource,
    loaded: Loaded,
    host: str,
    port: int,
    log_level: str | None,
    ready: "Queue[int]",
    commands: Connection,
) -> None:
    # Ctrl-C at a terminal signals the whole foreground process group; the parent relays it.
    os.setpgrp()
    from gateway import logs
    from gateway.lifecycle import Gateway
    from gateway.server import run_loop

    conf = loaded.config.logging
    logs.setup(conf.format, log_level or conf.level)
    logs.ACCESS.disabled = not conf.access_log
    gateway = Gateway(
        source, loaded, host, port, log_level=log_level, reuse_port=True, on_ready=ready.put, commands=commands
    )
    try:
        run_loop(gateway.run())
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


def serve_workers(
    source: ConfigSource,
    loaded: Loaded,
    host: str,
    port: int,
    workers: int,
    log_level: str | None = None,
    watch: bool = False,
) -> int:
    path, owned = _prepare_dir()
    held = _reserve_port(host) if port == 0 else None
    if held is not None:
        port = held.getsockname()[1]
    sup = _Supervisor(source, loaded, host, port, log_level, watch and source.path is not None, path)
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, sup.on_signal) for sig in handled}
    code = 0
    try:
        for slot in range(workers):
            sup.start(slot)
        if not sup.await_ready(workers):
            code = 1
        else:
            scheme = "https" if loaded.config.listen.tls else "http"
            log.info("listening on %s://%s:%s (%d workers, metrics in %s)", scheme, host, port, workers, path)
            code = sup.supervise()
    finally:
        sup.stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sup.close()
        if held is not None:
            held.close()
        if owned:
            shutil.rmtree(path, ignore_errors=True)
            os.environ.pop(MULTIPROC_ENV, None)
    return code


class _Supervisor:
    """The parent's state: the workers, their pipes, the configuration they serve, the stop."""

    def __init__(
        self, source: ConfigSource, loaded: Loaded, host: str, port: int, log_level: str | None, watch: bool, path: str
    ) -> None:
        self.source = source
        # The configuration the workers serve: a replacement worker starts with it too.
        self.loaded = loaded
        self.host = host
        self.port = port
        self.log_level = log_level
        self.watch = watch
        self.path = path
        self.ctx = multiprocessing.get_context("spawn")
        self.ready: Queue[int] = self.ctx.Queue()
        self.procs: dict[int, BaseProcess] = {}
        self.pipes: dict[int, Connection] = {}
        self.started: dict[int, float] = {}
        self.stop_signal: signal.Signals | None = None
        self.deadline = float("inf")
        self.reload_wanted = False
        self.reaped: set[int] = set()

    def start(self, slot: int) -> None:
        reader, writer = self.ctx.Pipe(duplex=False)
        p = self.ctx.Process(
            target=_worker,
            args=(self.source, self.loaded, self.host, self.port, self.log_level, self.ready, reader),
            name=f"gateway-worker-{slot}",
            daemon=False,
        )
        p.start()
        reader.close()  # the worker has its own copy; it sees EOF once the parent's end closes
        old = self.pipes.pop(slot, None)
        if old is not None:
            old.close()
        self.procs[slot] = p
        self.pipes[slot] = writer
        self.started[slot] = time.monotonic()

    def alive(self) -> list[BaseProcess]:
        return [p for p in self.procs.values() if p.exitcode is None]

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        if sig is signal.SIGHUP:
            self.reload_wanted = True  # done in the main loop, not in the handler
            return
        now = time.monotonic()
        if self.stop_signal is None:
            self.stop_signal = sig
            self.deadline = now + stop_budget(self.loaded.config.shutdown, sig)
        else:
            # A second signal: the workers stop at once, and the parent waits only the margin.
            self.deadline = min(self.deadline, now + STOP_MARGIN_S)
        self.relay(sig)

    def relay(self, sig: signal.Signals) -> None:
        for p in self.alive():
            if p.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, sig)

    def await_ready(self, n: int) -> bool:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        count = 0
        while count < n:
            if self.stop_signal is not None or time.monotonic() > deadline:
                return False
            if any(p.exitcode is not None for p in self.procs.values()):
                print("a worker failed to start", file=sys.stderr)
                return False
            with contextlib.suppress(Exception):
                self.ready.get(timeout=0.2)
                count += 1
        return True

    def supervise(self) -> int:
        """Restart workers that exit, reload on request, until a stop signal; then wait for the
        workers to drain (until the deadline: stop_all kills what is left)."""
        seen = self.source.fingerprint(self.loaded.config) if self.watch else None
        next_look = time.monotonic() + WATCH_INTERVAL_S
        told = False
        while True:
            if self.stop_signal is not None and not told:
                told = True
                wait_s = max(self.deadline - time.monotonic(), 0.0)
                log.info("%s: passed on to the workers; waiting up to %.0fs for them", self.stop_signal.name, wait_s)
            if self.stop_signal is not None and (not self.alive() or time.monotonic() >= self.deadline):
                return 0
            wait([p.sentinel for p in self.alive()], timeout=0.5)
            if self.stop_signal is None:
                if self.reload_wanted:
                    self.reload_wanted = False
                    self.reload("SIGHUP")
                if self.watch and time.monotonic() >= next_look:
                    next_look = time.monotonic() + WATCH_INTERVAL_S
                    now = self.source.fingerprint(self.loaded.config)
                    if now is not None and now != seen:
                        self.reload(f"{self.source.path} changed")
                        seen = self.source.fingerprint(self.loaded.config)
            for slot, p in list(self.procs.items()):
                if p.exitcode is None or p.pid in self.reaped:
                    continue
                self.reap(p)
                if self.stop_signal is not None:
                    continue
                if time.monotonic() - self.started[slot] < MIN_UPTIME_S:
                    print(f"worker {p.pid} exited with {p.exitcode} right after starting; stopping", file=sys.stderr)
                    return 1
                log.warning("worker %s exited with %s; starting another", p.pid, p.exitcode)
                self.start(slot)

    def reap(self, p: BaseProcess) -> None:
        if p.pid is not None:
            self.reaped.add(p.pid)
            _mark_dead(p.pid, self.path)

    def reload(self, why: str) -> None:
        """Read and check the configuration once, for every worker."""
        if self.source.path is None:
            log.warning("%s: the embedded default configuration is in use: there is no file to reload", why)
            return
        log.info("%s: reloading the configuration from %s", why, self.source.path)
        try:
            loaded = self.source.load()
        except ConfigError as e:
            for line in e.lines:
                log.error("config error: %s", line)
            log.error(
                "the configuration in %s was rejected; configuration %s stays live",
                self.source.path,
                self.loaded.digest,
            )
            self.tell((REJECTED, None))
            return
        self.loaded = loaded
        self.tell((LOAD, loaded))

    def tell(self, message: tuple[str, Any]) -> None:
        for slot, conn in self.pipes.items():
            if self.procs[slot].exitcode is None:
                with contextlib.suppress(OSError):
                    conn.send(message)

    def stop_all(self) -> None:
        """Stop the workers still running (a failed start, or a drain past its deadline): those
        not told yet are told to stop (SIGINT: no drain delay); past the deadline, killed."""
        if self.alive() and self.stop_signal is None:
            self.stop_signal = signal.SIGINT
            self.deadline = time.monotonic() + stop_budget(self.loaded.config.shutdown, signal.SIGINT)
            self.relay(signal.SIGINT)
        for p in self.procs.values():
            p.join(max(self.deadline - time.monotonic(), 0.1))
            if p.exitcode is None:
                log.warning("worker %s did not stop in time: killing it", p.pid)
                p.kill()
                p.join()
            if p.pid not in self.reaped:
                self.reap(p)

    def close(self) -> None:
        for conn in self.pipes.values():
            conn.close()
        self.ready.close()
