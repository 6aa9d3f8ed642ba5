"""One serving process from start to exit: its configurations as they come and go, and the drain.

Each configuration that goes live is a generation: an app built by `create_app` (all of them
sharing one `Metrics`), started, and handed the new requests by the listener's Switch; the one it
replaces keeps the requests it has until they are done, then stops. A reload (SIGHUP, a change
that `--watch-config` sees, or, under `--workers`, a word from the parent process) builds the next
generation from the configuration file; a configuration that fails a check is logged, one line per
problem, and the live one stays. The listening address and the metrics listener are the start's:
changing them takes a restart. The listener's certificate is reloaded into the live TLS context.

SIGTERM drains: /readyz answers 503 at once, connections are still taken for
`shutdown.drain_delay_s`, then requests in flight get `shutdown.grace_s`, then streams still open
end their dialect's way (gateway.server.drain). SIGINT does the same without the delay; a second
SIGTERM or SIGINT stops at once.
"""

import asyncio
import contextlib
import gc
import logging
import os
import signal
import time
from collections.abc import Callable, Coroutine
from multiprocessing.connection import Connection
from typing import Any

from gateway import logs
from gateway.app import create_app, process_metrics
from gateway.codec.contract import StateStore
from gateway.config import Config, ConfigError
from gateway.health import READINESS
from gateway.metrics import Metrics, multiprocess_dir
from gateway.protocol import Guard
from gateway.proxy.state import make_store
from gateway.reload import ConfigSource, Loaded
from gateway.server import Listener, Switch, drain, listen_ssl, reload_ssl, start_app, stop_app, stop_signals

log = logging.getLogger("gateway")
# How often --watch-config looks at the file.
WATCH_INTERVAL_S = 2.0
# What the parent of worker processes sends each of them: a configuration it checked, to go live
# (LOAD, with the Loaded), or word that it rejected one, to be counted (REJECTED).
LOAD = "load"
REJECTED = "rejected"


# Net allocations of tracked objects between two collections of the youngest generation. A
# request makes a few hundred objects that reference counting frees; at Python's default (700)
# the collector still ran every few requests and took about a tenth of the CPU under load.
# Cyclic garbage waits for at most this many objects (a few MiB).
YOUNG_THRESHOLD = 10_000


def settle_collector() -> None:
    """Tune the garbage collector for serving, once the gateway is up: what exists now (modules,
    the configuration, the app) lives as long as the process, so it is moved out of the
    collector's sight (`gc.freeze`) instead of being traversed by every full collection."""
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 10, 10)


class Gateway:
    """One serving process: listener, generations, signals, reloads and the drain."""

    def __init__(
        self,
        source: ConfigSource,
        loaded: Loaded,
        host: str,
        port: int,
        *,
        log_level: str | None = None,
        watch: bool = False,
        reuse_port: bool = False,
        on_ready: Callable[[int], None] | None = None,
        commands: Connection | None = None,
    ) -> None:
        self.source = source
        self.loaded = loaded
        self.host = host
        self.port = port
        self._start = loaded.config
        self._log_level = log_level  # --log-level, which outranks the file's on every load
        self._watch = watch and source.path is not None and commands is None
        self._reuse_port = reuse_port
        self._on_ready = on_ready
        self._commands = commands  # under --workers: the parent's word (LOAD, REJECTED)
        self.metrics = Metrics()
        # What stateful APIs keep, made once per `responses_store` setting: a reload keeps it.
        self._stores: dict[str, StateStore] = {}
        self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()
        self._why = "stopping"
        self._reloading = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._watcher: asyncio.Task[None] | None = None
        self.listener: Listener | None = None

    def _store(self, config: Config) -> StateStore:
        key = config.responses_store.model_dump_json()
        if key not in self._stores:
            self._stores = {key: make_store(config.responses_store)}
        return self._stores[key]

    async def run(self) -> None:
        """Serve until told to stop, then drain."""
        config = self.loaded.config
        app = create_app(config, self.metrics, self._store(config))
        await start_app(app)
        switch = Switch(app)
        self.listener = Listener(switch, Guard.of(config.limits), listen_ssl(config))
        try:
            async with process_metrics(config, self.metrics, lambda: self.loaded.config):
                bound = await self.listener.start(self.host, self.port, self._reuse_port)
                await self._serve(bound)
        finally:
            await switch.close()

    async def _serve(self, bound: int) -> None:
        assert self.listener is not None
        loop = asyncio.get_running_loop()
        on_stop = stop_signals(self._stopping, self._hurry)

        def stop(sig: signal.Signals) -> None:
            if not self._stopping.is_set():
                self._why = sig.name
            on_stop(sig)

        # The handlers go in before anyone is told the gateway is up, since a signal without
        # one would end the process on the spot.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop, sig)
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
        if self._commands is not None:
            loop.add_reader(self._commands.fileno(), self._on_command)
        try:
            self._went_live(self.loaded, None)
            settle_collector()
            if self._on_ready is None:
                scheme = "https" if self.listener.ssl_context else "http"
                log.info("listening on %s://%s:%s", scheme, self.host, bound)
            else:
                self._on_ready(bound)
            if self._watch:
                self._watcher = asyncio.create_task(self._watch_file())
            await self._stopping.wait()
        except asyncio.CancelledError:
            self._hurry.set()
            raise
        finally:
            if self._commands is not None:
                loop.remove_reader(self._commands.fileno())
            try:
                await self._drain()  # the signal handlers stay: a second signal hurries it
            finally:
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    loop.remove_signal_handler(sig)

    async def _drain(self) -> None:
        assert self.listener is not None
        shutdown = self.loaded.config.shutdown
        # Only SIGTERM (an orchestrator taking the process out of rotation) waits for load
        # balancers to notice; Ctrl-C, or a parent that is gone, does not.
        delay = shutdown.drain_delay_s if self._why == "SIGTERM" else 0.0
        for app in self.listener.switch.apps():
            if READINESS in app:
                app[READINESS].draining = True
        if delay:
            log.info(
                "%s: draining: /readyz answers 503; connections are taken for %gs more, "
                "then requests in flight get up to %gs",
                self._why,
                delay,
                shutdown.grace_s,
            )
        else:
            log.info("%s: stopping: requests in flight get up to %gs", self._why, shutdown.grace_s)
        if self._watcher is not None:
            self._watcher.cancel()
        # A reload under way finishes: it sees that the process is stopping and does not go live.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await drain(self.listener, delay, shutdown.grace_s, self._hurry)
        log.info("stopped")

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # Reloads

    def _on_sighup(self) -> None:
        if self._commands is not None:
            log.warning("SIGHUP: the parent process (pid %d) reloads the configuration: send it there", os.getppid())
            return
        self._spawn(self.reload("SIGHUP"))

    async def reload(self, why: str) -> None:
        """Load the configuration file again; it goes live if it passes every check."""
        async with self._reloading:
            if self._stopping.is_set():
                log.info("%s: stopping, so not reloading", why)
                return
            if self.source.path is None:
                log.warning("%s: the embedded default configuration is in use: there is no file to reload", why)
                return
            log.info("%s: reloading the configuration from %s", why, self.source.path)
            try:
                loaded = self.source.load()
            except ConfigError as e:
                self._rejected(e.lines)
                return
            await self._go_live(loaded)

    def _on_command(self) -> None:
        assert self._commands is not None
        try:
            while self._commands.poll():
                kind, payload = self._commands.recv()
                if kind == LOAD:
                    self._spawn(self._load_checked(payload))
                elif kind == REJECTED:
                    # The parent has logged the problems, once for all the workers.
                    self.metrics.config_loads.labels("rejected").inc()
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(self._commands.fileno())
            if not self._stopping.is_set():
                log.warning("the parent process is gone: stopping")
                self._why = "parent gone"
                self._stopping.set()

    async def _load_checked(self, loaded: Loaded) -> None:
        async with self._reloading:
            if not self._stopping.is_set():
                await self._go_live(loaded)

    def _rejected(self, lines: list[str]) -> None:
        for line in lines:
            log.error("config error: %s", line)
        log.error(
            "the configuration in %s was rejected; configuration %s stays live", self.source.path, self.loaded.digest
        )
        self.metrics.config_loads.labels("rejected").inc()

    async def _go_live(self, loaded: Loaded) -> None:
        assert self.listener is not None
        config = self._fixed(loaded.config)
        app = create_app(config, self.metrics, self._store(config))
        try:
            await start_app(app)
        except Exception as e:
            log.exception("the new configuration's app did not start")
            self._rejected([f"cannot start: {e}"])
            return
        if self._stopping.is_set():
            await stop_app(app)
            return
        if not self._reload_tls(config):
            await stop_app(app)
            return
        self.listener.switch.swap(app)
        self.listener.guard = Guard.of(config.limits)
        self._reload_logging(config)
        self._went_live(Loaded(config, loaded.digest), self.loaded.digest)

    def _fixed(self, config: Config) -> Config:
        """The new configuration, with what takes a restart to change kept as it was, and said."""
        start = self._start
        if (config.listen.host, config.listen.port) != (start.listen.host, start.listen.port):
            log.warning(
                "listen.host and listen.port are %s:%s in the new configuration: changing them takes a "
                "restart; the listener stays where it is",
                config.listen.host,
                config.listen.port,
            )
        kept = start.metrics
        if config.metrics.port != kept.port or (kept.port is not None and config.metrics.path != kept.path):
            log.warning("metrics: changing the separate metrics listener takes a restart; it stays as it is")
            config = config.model_copy(update={"metrics": kept})
        return config

    def _reload_tls(self, config: Config) -> bool:
        """Load the listener's certificate again; False when it fails (the configuration is then
        rejected and the old certificate restored)."""
        assert self.listener is not None
        ctx = self.listener.ssl_context
        new = config.listen.tls
        if (ctx is None) != (new is None):
            log.warning("listen.tls: turning TLS on or off takes a restart; the listener stays as it is")
            return True
        if ctx is None or new is None:
            return True
        old = self.loaded.config.listen.tls
        try:
            reload_ssl(ctx, config)
        except OSError as e:
            if old is not None:
                with contextlib.suppress(OSError):
                    reload_ssl(ctx, self.loaded.config)
            self._rejected([f"listen.tls: cannot load the certificate or key: {e}"])
            return False
        if old is not None and old.client_ca and old.client_ca != new.client_ca:
            log.warning(
                "listen.tls.client_ca: certificates from the CA in %s are still accepted until a restart", old.client_ca
            )
        return True

    def _reload_logging(self, config: Config) -> None:
        if config.logging == self.loaded.config.logging:
            return
        logs.setup(config.logging.format, self._log_level or config.logging.level)
        logs.ACCESS.disabled = not config.logging.access_log

    def _went_live(self, loaded: Loaded, previous: str | None) -> None:
        m = self.metrics
        m.config_loads.labels("live").inc()
        if previous is not None and previous != loaded.digest:
            m.config_info.labels(previous).set(0)
            if multiprocess_dir() is None:
                # With worker processes a value stays in the shared files: zero is all there is.
                m.config_info.remove(previous)
        m.config_info.labels(loaded.digest).set(1)
        m.config_loaded.set(time.time())
        self.loaded = loaded
        log.info("configuration %s is live (%s)", loaded.digest, self.source.describe())

    async def _watch_file(self) -> None:
        seen = self.source.fingerprint(self.loaded.config)
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            now = self.source.fingerprint(self.loaded.config)
            if now is None or now == seen:
                continue
            await self.reload(f"{self.source.path} changed")
            # After a rejection the same files are not tried again until they change.
            seen = self.source.fingerprint(self.loaded.config)
