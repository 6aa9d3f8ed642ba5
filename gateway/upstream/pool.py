"""A backend's connections, and one request through them.

`Pool.request` takes a kept-alive connection to the target's origin (the most recently used, so
that the others age out) or opens one, writes the request in one piece and returns the `Answer`
once its head has come. At most `limit` connections are in use at once; further requests wait
for one, in order. A connection goes back to the pool only when its answer was read to the end
and both sides keep it open; every other end closes it, which is how a backend learns that the
client went away.
"""

from __future__ import annotations

import asyncio
import collections
import math
import ssl
from collections.abc import Callable, Mapping

from gateway.upstream.answer import Answer
from gateway.upstream.connection import Connection
from gateway.upstream.faults import Broken, ConnectFailed, ConnectTimeout, PoolBusy, Unsendable
from gateway.upstream.target import Target

# Sent unless a backend's own headers say otherwise. Compression is not asked for: answers are
# small next to the CPU it costs both sides (a backend that compresses anyway is decoded).
DEFAULT_HEADERS = {"User-Agent": "llm-protocol-gateway", "Accept": "*/*", "Accept-Encoding": "identity"}
# A body up to this size goes in the same write as the head.
_JOIN_BELOW = 64 * 1024


class Alarm:
    """One timer for many times: armed for the earliest it is told of, it runs `ring`, which
    does what is due and says when it next must (0: never), and arms itself for that."""

    __slots__ = ("_handle", "_loop", "_ring", "due")

    def __init__(self, loop: asyncio.AbstractEventLoop, ring: Callable[[], float]) -> None:
        self._loop = loop
        self._ring = ring
        self._handle: asyncio.TimerHandle | None = None
        self.due = math.inf  # when it rings next

    def at(self, when: float) -> None:
        if when < self.due:
            if self._handle is not None:
                self._handle.cancel()
            self._handle = self._loop.call_at(when, self._rang)
            self.due = when

    def _rang(self) -> None:
        self._handle = None
        self.due = math.inf
        then = self._ring()
        if then:
            self.at(then)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.due = math.inf


class Pool:
    """One backend's connections, to all its replicas and other URLs (its metrics page)."""

    def __init__(self, limit: int, ssl_context: ssl.SSLContext | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self._limit = limit
        self._ssl = ssl_context
        self._busy = 0  # connections in use, and being opened
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._using: set[Connection] = set()
        self.closed = False
        # One alarm for every answer's deadline: it fails the overdue answers. An answer's
        # deadline costs its request no timer of its own to set and cancel.
        self._deadlines = Alarm(self.loop, self._check)
        self.watch = self._deadlines.at  # an answer must be done by then (the loop's clock)
        # One for the idle connections: it closes every one whose time is up, so that a burst's
        # connections do not stay open until the next request.
        self._idle_times = Alarm(self.loop, self._let_go)

    async def request(
        self,
        target: Target,
        method: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        connect_timeout: float | None,
        timeout: float | None,
        head_timeout: float | None = None,
        gap: bool = False,
        meanwhile: Callable[[], object] | None = None,
    ) -> Answer:
        """Send one request and wait for its answer's head. `timeout`: the answer (head and
        body) must be all there within it, or with `gap`, no wait for the next piece of it may
        be longer. `head_timeout` (unset: `timeout`) bounds the wait for a connection to come
        free and, once the request is written, for the whole head. `meanwhile` runs once the
        request is written, before the wait. A Fault for any failure; a cancelled request
        closes its connection."""
        if self.closed:
            raise ConnectFailed("the backend's connections are closed")
        data = _request_bytes(method, target, headers, body)
        head = timeout if head_timeout is None else head_timeout
        conn = await self._acquire(target, connect_timeout, head)
        try:
            conn.send(data, timeout, gap, head)
            if meanwhile is not None:
                meanwhile()
            try:
                await conn.head()
            except Broken:
                if not (conn.reused and method == "GET" and not conn.status):
                    raise
                # A kept-alive connection the backend had closed as the request went out: a GET
                # may go again on a fresh one (a POST may have started a generation).
                self.done(conn, False)
                conn = await self._acquire(target, connect_timeout, head, fresh=True)
                conn.send(data, timeout, gap, head)
                await conn.head()
        except BaseException:
            self.done(conn, False)
            raise
        return Answer(self, conn)

    async def _acquire(
        self, target: Target, connect_timeout: float | None, wait: float | None, fresh: bool = False
    ) -> Connection:
        if self._busy >= self._limit:
            await self._wait_turn(wait)
        self._busy += 1
        try:
            if not fresh:
                conn = self._take_idle(target.key)
                if conn is not None:
                    self._using.add(conn)
                    return conn
            conn = await self._connect(target, connect_timeout)
        except BaseException:
            self._busy -= 1
            self._next_turn()
            raise
        self._using.add(conn)
        return conn

    async def _wait_turn(self, timeout: float | None) -> None:
        """Wait, in order of arrival, until fewer than `limit` connections are in use."""
        try:
            async with asyncio.timeout(timeout):
                while self._busy >= self._limit:
                    waiter = self.loop.create_future()
                    self._waiters.append(waiter)
                    try:
                        await waiter
                    except BaseException:
                        if waiter.cancelled():
                            self._waiters.remove(waiter)
                        else:
                            self._next_turn()  # woken, then cancelled: the turn goes to the next
                        raise
        except TimeoutError:
            raise PoolBusy(f"had all its {self._limit} connections in use for {timeout:g}s") from None

    def _next_turn(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _take_idle(self, key: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        now = self.loop.time()
        while idle:
            conn = idle.pop()
            if conn.lost or conn.idle_until <= now or conn.transport is None or conn.transport.is_closing():
                conn.close()
                continue
            return conn
        return None

    async def _connect(self, target: Target, timeout: float | None) -> Connection:
        ctx: ssl.SSLContext | None = None
        if target.tls:
            ctx = self._ssl or _default_ssl()
        try:
            async with asyncio.timeout(timeout):
                _, conn = await target.dial(self.loop, lambda: Connection(self, target.key), ctx)
        except TimeoutError:
            raise ConnectTimeout(f"no connection within {timeout:g}s") from None
        except (OSError, ValueError) as e:
            # refused, unreachable, unresolvable, TLS refused or unverified (ssl errors are OSErrors)
            raise ConnectFailed(f"{type(e).__name__}: {e}") from None
        return conn

    def done(self, conn: Connection, keep: bool) -> None:
        """A request is done with `conn`: kept for the next, or closed."""
        if conn not in self._using:
            return
        self._using.discard(conn)
        self._busy -= 1
        if keep and conn.keep_s > 0 and not self.closed:
            until = conn.idle_until = self.loop.time() + conn.keep_s
            self._idle.setdefault(conn.key, []).append(conn)
            if until < self._idle_times.due:
                self._idle_times.at(until)
        else:
            conn.close()
        self._next_turn()

    def _let_go(self) -> float:
        """Close the idle connections whose time is up; the next one's time."""
        now = self.loop.time()
        soonest = 0.0
        for idle in self._idle.values():
            for conn in [c for c in idle if c.idle_until <= now]:
                idle.remove(conn)
                conn.close()
            for conn in idle:
                if not soonest or conn.idle_until < soonest:
                    soonest = conn.idle_until
        return soonest

    def _check(self) -> float:
        """Fail the overdue answers; the next deadline."""
        now = self.loop.time()
        soonest = 0.0
        for conn in list(self._using):
            due = conn.overdue(now)
            if due and (not soonest or due < soonest):
                soonest = due
        return soonest

    def lost(self, conn: Connection) -> None:
        """The connection closed (either side): out of the idle pool, if it was there."""
        if conn in self._using:
            return  # its request's owner finds out, and gives it back
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    async def close(self) -> None:
        """Close every connection; requests after this fail at once."""
        self.closed = True
        self._deadlines.cancel()
        self._idle_times.cancel()
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        for conn in list(self._using):
            conn.close()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        await asyncio.sleep(0)  # the transports' close callbacks run


def _request_bytes(method: str, target: Target, headers: Mapping[str, str], body: bytes | None) -> bytes:
    lines = "".join([f"{k}: {v}\r\n" for k, v in headers.items()])
    # The backend's own headers may name its Host (a virtual host behind an ingress) or its
    # credentials; then the URL's are not sent as well.
    named = ("\n" + lines).lower()
    host = b"" if "\nhost:" in named else b"Host: %s\r\n" % target.host_header
    auth = target.authorization is not None and "\nauthorization:" not in named
    if auth:
        lines += f"Authorization: {target.authorization}\r\n"
    if body is not None:
        lines += f"Content-Length: {len(body)}\r\n"
    # A line break in a name or value would end the header early: a header of its own, or a
    # request of its own, smuggled in. Every CR and LF there is must be one of ours.
    n = len(headers) + auth + (body is not None)
    if lines.count("\n") != n or lines.count("\r") != n or "\x00" in lines:
        raise Unsendable("a header name or value holds a line break or a NUL")
    hop = target.hop  # an http proxy's credentials, unless the backend's headers name their own
    if hop and "\nproxy-authorization:" in named:
        hop = b""
    head = b"%s %s HTTP/1.1\r\n%s%s%s\r\n" % (method.encode("ascii"), target.path, host, hop, lines.encode("utf-8"))
    if body is None:
        return head
    return head + body if len(body) < _JOIN_BELOW else b"".join((head, body))


_DEFAULT_SSL: list[ssl.SSLContext] = []


def _default_ssl() -> ssl.SSLContext:
    """The system's trust store, for an https backend without a `tls:` section."""
    if not _DEFAULT_SSL:
        _DEFAULT_SSL.append(ssl.create_default_context())
    return _DEFAULT_SSL[0]
