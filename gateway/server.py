"""Serving on a socket: the listener (on the guarded protocol, gateway.protocol), the switch
between app generations, the drain.

The listener hands each request to whichever app the `Switch` holds when it arrives, so that a
reloaded configuration (a new app) takes new requests while the one it replaced finishes its own.
`drain` is how serving ends: connections are still taken for a while, then no more; the requests
in flight get a grace period; streams still open after it end their dialect's way.
"""

import asyncio
import logging
import signal
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from gateway import protocol as protocol_members
from gateway.config import Config, Limits, Shutdown
from gateway.protocol import Guard, GuardedServer
from gateway.proxy.services import SERVICES

log = logging.getLogger("gateway")
# After the grace period, how long the streams that were ended get to write their error and
# terminator, and then how long anything else still running gets before it is cancelled.
END_S = 1.0
CUT_S = 0.5


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run the server coroutine on uvloop when it is installed (it is on Linux and macOS):
    the gateway spends most of its time in the event loop and socket I/O, where uvloop is
    markedly faster; otherwise on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def listen_ssl(config: Config) -> ssl.SSLContext | None:
    tls = config.listen.tls
    if tls is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tls.cert, tls.key)
    if tls.client_ca:
        ctx.load_verify_locations(tls.client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def reload_ssl(ctx: ssl.SSLContext, config: Config) -> None:
    """Load the configuration's certificate chain (and client CA) into the context the listener
    serves with: connections from now on shake hands with them, open ones keep theirs. A CA that
    was trusted stays trusted (OpenSSL cannot forget one) until a restart."""
    tls = config.listen.tls
    assert tls is not None
    ctx.load_cert_chain(tls.cert, tls.key)
    if tls.client_ca:
        ctx.load_verify_locations(tls.client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE


async def start_app(app: web.Application) -> None:
    """Start an app as aiohttp's AppRunner does (its startup hooks and cleanup contexts), for a
    listener that is not that app's own."""
    protocol_members.bind_loop(app)
    app.on_startup.freeze()
    try:
        await app.startup()
    except BaseException:
        await app.cleanup()  # the cleanup contexts that did start are closed
        raise
    app.freeze()


async def stop_app(app: web.Application) -> None:
    await app.shutdown()
    await app.cleanup()


@dataclass(eq=False, slots=True)
class _Live:
    app: web.Application
    in_flight: int = 0
    retired: bool = False
    routes: protocol_members.Routes = field(init=False)

    def __post_init__(self) -> None:
        self.routes = protocol_members.Routes(self.app)


def _announce(app: web.Application, closing: bool) -> None:
    """Tell the app's exchange handler whether its answers are to say `Connection: close` (it
    sets that on a stream before the stream's headers go out)."""
    svc = app.get(SERVICES)
    if svc is not None:
        svc.drain.closing = closing


class Switch:
    """Hands each request to the app that is current when it arrives, and counts what every app
    has in flight, so that an app replaced by a newer one is stopped once its last request is done
    (it holds the backend connections those requests use). Apps are started before they are given
    to it (`start_app`), and it stops them."""

    def __init__(self, app: web.Application) -> None:
        self._current = _Live(app)
        self._live: list[_Live] = [self._current]
        self._stopping: set[asyncio.Task[None]] = set()
        # Set while nothing is in flight, in any app.
        self.idle = asyncio.Event()
        self.idle.set()
        self._closing = False

    @property
    def closing(self) -> bool:
        """Draining: every answer says `Connection: close`, so clients move to another server."""
        return self._closing

    @closing.setter
    def closing(self, value: bool) -> None:
        self._closing = value
        for live in self._live:
            _announce(live.app, value)

    @property
    def current(self) -> web.Application:
        return self._current.app

    def apps(self) -> list[web.Application]:
        """The apps not stopped yet: the current one and those finishing their requests."""
        return [live.app for live in self._live]

    def in_flight(self) -> int:
        return sum(live.in_flight for live in self._live)

    def make_request(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: "asyncio.Task[None]",
    ) -> BaseRequest:
        # The current app's request carries its body size limit (`limits.max_body_bytes`).
        return protocol_members.make_request(self._current.app, message, payload, protocol, writer, task)

    async def handle(self, request: BaseRequest) -> web.StreamResponse:
        live = self._current
        live.in_flight += 1
        self.idle.clear()
        try:
            resp = await live.routes.handle(request)
            if self.closing and not resp.prepared:
                # The answer says `Connection: close`, so its client opens no more requests on
                # this connection. (A stream whose headers went out earlier keeps its connection:
                # closing it unannounced afterwards could meet the client's next request on it.)
                resp.force_close()
            return resp
        finally:
            live.in_flight -= 1
            if live.retired and not live.in_flight:
                self._stop(live)
            if not self.in_flight():
                self.idle.set()

    def swap(self, app: web.Application) -> None:
        """New requests go to `app` (started) from now on; the app it replaces finishes the
        requests it has, then stops."""
        old = self._current
        _announce(app, self._closing)
        self._current = _Live(app)
        self._live.append(self._current)
        old.retired = True
        if not old.in_flight:
            self._stop(old)

    def _stop(self, live: _Live) -> None:
        self._live.remove(live)
        task = asyncio.create_task(stop_app(live.app))
        self._stopping.add(task)
        task.add_done_callback(self._stopped)

    def _stopped(self, task: "asyncio.Task[None]") -> None:
        self._stopping.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("stopping a replaced configuration's app failed", exc_info=task.exception())

    def end_streams(self) -> int:
        """End every stream still being written, in every app, the dialect's way (an in-band
        error and the terminator); how many there were."""
        return sum(app[SERVICES].drain.end_streams() for app in self.apps() if SERVICES in app)

    async def close(self) -> None:
        """Stop every app: after the listener has closed, nothing is in flight any more."""
        for live in list(self._live):
            self._stop(live)
        while self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)


class Listener:
    """The public port: a guarded HTTP server whose requests go to a Switch."""

    def __init__(self, switch: Switch, guard: Guard, ssl_context: ssl.SSLContext | None = None) -> None:
        self.switch = switch
        self.ssl_context = ssl_context
        self._guard = guard
        self._server: GuardedServer | None = None
        self._runner: web.ServerRunner | None = None

    @property
    def guard(self) -> Guard:
        return self._guard

    @guard.setter
    def guard(self, guard: Guard) -> None:
        """Limits for the connections opened from now on."""
        self._guard = guard
        if self._server is not None:
            self._server.guard = guard

    async def start(self, host: str, port: int, reuse_port: bool = False) -> int:
        """Listen; the port bound (the one asked for, or the one the kernel chose for 0)."""
        server = GuardedServer(
            self.switch.handle,
            request_factory=self.switch.make_request,
            handler_cancellation=True,
            loop=asyncio.get_running_loop(),
            access_log=None,
        )
        server.guard = self._guard
        self._server = server
        # By the time the runner's own shutdown runs, the drain has waited for everything that
        # was going to finish: what is left is cancelled after a moment.
        self._runner = web.ServerRunner(server, shutdown_timeout=CUT_S)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, host, port, ssl_context=self.ssl_context, backlog=1024, reuse_port=reuse_port or None
        )
        await site.start()
        addresses = self._runner.addresses
        return int(addresses[0][1]) if addresses else port

    async def stop_accepting(self) -> None:
        """Close the listening socket. Open connections stay: each closes after its next answer,
        which says so (`Connection: close`), or when the drain ends. Closing an idle kept-alive
        connection unannounced could meet a request its client is sending on it that moment,
        which would then get no answer at all."""
        assert self._runner is not None and self._server is not None
        for site in list(self._runner.sites):
            await site.stop()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def _either(hurry: asyncio.Event, timeout: float, done: asyncio.Event | None = None) -> None:
    """Wait `timeout` seconds, or less if `hurry` (or `done`) is set."""
    events = [hurry] if done is None else [hurry, done]
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def drain(listener: Listener, delay_s: float, grace_s: float, hurry: asyncio.Event) -> None:
    """End serving. New connections are still taken for `delay_s` (load balancers take a few
    seconds to stop sending any); then the listening socket closes, and the requests in flight
    get `grace_s` to finish. Streams still open after that end with their dialect's in-band error
    and terminator rather than a cut connection; whatever else is left is cancelled. `hurry` set
    (a second signal) skips the waiting that remains."""
    switch = listener.switch
    switch.closing = True
    if delay_s > 0 and not hurry.is_set():
        await _either(hurry, delay_s)
    await listener.stop_accepting()
    n = switch.in_flight()
    if n and not hurry.is_set():
        log.info("no longer taking connections; waiting up to %gs for %d request(s) in flight", grace_s, n)
        await _either(hurry, grace_s, switch.idle)
    else:
        log.info("no longer taking connections")
    ended = switch.end_streams()
    if ended:
        log.warning("ending %d stream(s) still open with their dialect's error", ended)
        await _either(asyncio.Event(), END_S, switch.idle)
    left = switch.in_flight()
    if left:
        log.warning("cancelling %d request(s) still in flight", left)
    await listener.close()
    await switch.close()


def stop_signals(stopping: asyncio.Event, hurry: asyncio.Event) -> Callable[[signal.Signals], None]:
    """A signal handler for SIGTERM and SIGINT: the first starts the drain, a second hurries it."""

    def on_signal(sig: signal.Signals) -> None:
        if stopping.is_set():
            log.warning("%s again: stopping now", sig.name)
            hurry.set()
        else:
            stopping.set()

    return on_signal


async def serve(
    app: web.Application,
    host: str,
    port: int,
    limits: Limits,
    ssl_context: ssl.SSLContext | None = None,
    shutdown: Shutdown | None = None,
) -> None:
    """Serve one app (a simulated server) until SIGINT or SIGTERM, then drain: no delay, since
    no load balancer is told anything, and the grace period of `shutdown`."""
    grace_s = (shutdown or Shutdown()).grace_s
    await start_app(app)
    listener = Listener(Switch(app), Guard.of(limits), ssl_context)
    try:
        bound = await listener.start(host, port)
    except BaseException:
        await listener.switch.close()
        raise
    stopping, hurry = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    on_signal = stop_signals(stopping, hurry)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        log.info("listening on %s://%s:%s", "https" if ssl_context else "http", host, bound)
        await stopping.wait()
    except asyncio.CancelledError:
        hurry.set()
        raise
    finally:
        await drain(listener, 0.0, grace_s, hurry)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
