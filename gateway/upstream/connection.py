"""One connection to a backend: it writes a request and reads its answer, one at a time.

The answer's head and body are parsed by httptools (llhttp), which undoes chunked framing; the
body is held here until the reader takes it, and reading from the socket pauses while more than
`HIGH_WATER` bytes wait, so a slow client holds back the backend rather than the gateway's
memory. A deadline (a whole answer's) or a gap (the next piece of a stream's) bounds the wait:
the connection keeps it, and its pool's watch enforces it.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, cast

import httptools

from gateway.upstream.decode import Decoder
from gateway.upstream.faults import BadAnswer, Broken, Fault, ReadTimeout
from gateway.upstream.head import MAX_HEAD, check_head, final_head

HIGH_WATER = 256 * 1024  # body bytes held before reading from the socket pauses
# How long a connection may sit unused and still take a request. A backend closes an idle
# connection on its own clock, and a request written as it does so is lost with it (a POST is
# never sent twice), so the gateway lets go first: under the 5 s after which uvicorn (vLLM's,
# SGLang's, LiteLLM's server) and Node close one. A backend that announces its own timeout
# (`Keep-Alive: timeout=N`) is left a second's margin under that, when it is shorter.
KEEP_IDLE_S = 4.0
KEEP_MARGIN_S = 1.0


class Owner(Protocol):
    """What a connection needs of its pool."""

    loop: asyncio.AbstractEventLoop

    def watch(self, due: float) -> None:
        """Enforce an answer's deadline (the loop's clock): see `Connection.overdue`."""

    def lost(self, conn: Connection) -> None:
        """The connection closed."""


class Connection(asyncio.Protocol):
    """The protocol of one connection. The pool hands it a request (`send`) and takes it back
    when its answer is read (`reusable`), or closes it."""

    def __init__(self, pool: Owner, key: tuple[str, str, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.idle_until = 0.0  # once back in the pool: the loop's time after which it is not used
        self.reused = False  # it served an answer before this one
        self._parser: httptools.HttpResponseParser  # from connection_made to connection_lost
        self._loop = pool.loop
        self._waiter: asyncio.Future[None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.raw_head = b""  # the answer's head as it came, status line and header lines
        self.fault: Fault | None = None
        self.head_done = False
        self.done = False
        self.keep_alive = False
        self.keep_s = KEEP_IDLE_S  # how long it may then sit unused (`Keep-Alive: timeout=`)
        self.decoder: Decoder | None = None
        self.length: int | None = None  # the answer's Content-Length, when it has one
        self._head_size = 0  # bytes read while the head was unfinished: bounds what the parser holds
        self._head_reads: list[bytes] = []  # those reads, in which the head is found
        self._interims = 0  # interim (1xx) answers passed over
        self._until_eof = False  # the body runs to the end of the connection
        self._buf: list[bytes] = []
        self._buffered = 0
        self._paused = False
        # The deadline the pool's watch enforces now (the loop's clock; 0: none: `overdue`). Until
        # the head has come it is the head's; then a whole answer's `end`, or with `gap`, the
        # longest wait for a stream's next piece, counted from `last`.
        self.due = 0.0
        self.end = 0.0
        self.gap = 0.0
        self.last = 0.0

    # ---- the pool's side --------------------------------------------------------------------

    def send(self, data: bytes, timeout: float | None, gap: bool, head: float | None) -> None:
        """Write a request; its answer must come within `timeout` seconds, or, with `gap`, no
        wait for the next piece of it may last longer than that. Its whole head must come
        within `head` seconds, and within `timeout` too when that bounds the whole answer."""
        assert self.transport is not None
        if self.done:
            self.reused = True
            self._reset()
        if timeout is not None:
            now = self._loop.time()
            due = end = now + timeout
            if gap:
                self.gap, self.last = timeout, now
            else:
                self.end = end
            if head is not None:
                # The head's own bound: within the whole answer's, or past a stream's first gap
                # (then the watch looks at the gap's end too, in case the head comes before it).
                first = now + head
                if first < end or gap:
                    due = first
            self.due = due
            self.pool.watch(end if end < due else due)
        elif head is not None:
            self.due = self._loop.time() + head
            self.pool.watch(self.due)
        self.transport.write(data)

    def reusable(self) -> bool:
        """Whether the next request may go on this connection: its answer was read to the end,
        both sides keep it open, and nothing is left over."""
        return self.done and self.keep_alive and self.fault is None and not self.lost and not self._buf

    def close(self) -> None:
        self.due = 0.0
        if self.transport is not None:
            self.transport.close()

    # ---- waiting ----------------------------------------------------------------------------

    async def head(self) -> None:
        """Wait for the answer's head (interim 1xx answers are passed over)."""
        while not self.head_done:
            if self.fault is not None:
                raise self.fault.again()
            waiter = self._waiter = self._loop.create_future()
            try:
                await waiter  # the common wait, without a coroutine of its own to go through
            finally:
                self._waiter = None
        if self.fault is not None:
            raise self.fault.again()

    def drained(self) -> bool:
        """Whether the body has all come and been taken (undecoded): `take` says b"" at once."""
        return self.done and not self._buf and self.decoder is None and self.fault is None

    async def take(self) -> bytes:
        """The body bytes that have come (decoded), waited for when none have; b"" at its end."""
        if self.decoder is not None:
            return await self._take_decoded(self.decoder)
        while True:
            buf = self._buf
            if buf:
                data = buf[0] if len(buf) == 1 else b"".join(buf)
                self._buf = []
                self._buffered = 0
                if self._paused:
                    self._resume()
                return data
            if self.done:
                return b""
            await self._wait()

    async def _take_decoded(self, decoder: Decoder) -> bytes:
        while True:
            if decoder.pending:
                out = decoder.more()
            elif self._buf or not self.done:
                out = decoder.feed(await self._take_raw())
            else:
                return decoder.end()
            if out:
                return out

    async def _take_raw(self) -> bytes:
        while not self._buf:
            if self.done:
                return b""
            await self._wait()
        data = b"".join(self._buf)
        self._buf = []
        self._buffered = 0
        if self._paused:
            self._resume()
        return data

    async def _wait(self) -> None:
        if self.fault is not None:
            raise self.fault.again()
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None
        if self.fault is not None:
            raise self.fault.again()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, fault: Fault) -> None:
        if self.fault is None and not self.done:
            # Kept without the traceback a callback's fault came with (or what it was raised
            # from): its frames hold this connection, which would then hold them, a cycle only
            # the collector ends. Each wait raises a copy of it (`Fault.again`).
            fault.__traceback__ = fault.__context__ = fault.__cause__ = None
            self.fault = fault
            self.due = 0.0
            if self.transport is not None:
                self.transport.close()
            self._wake()

    def overdue(self, now: float) -> float:
        """Fail the answer with ReadTimeout if its time is up; else when it will be (0: never)."""
        if self.due == 0.0 or self.done:
            return 0.0
        if self.gap and self.head_done:
            # Counted from the last piece: a stream only fails when one gap is too long. While
            # pieces wait for a reader that is slow to take them, the wait is not the backend's.
            if self._buf or self._paused:
                self.last = now
            self.due = self.last + self.gap
        if self.due > now:
            if self.gap and not self.head_done and now + self.gap < self.due:
                return now + self.gap  # a head that comes now starts the gap clock: look then
            return self.due
        self._fail(
            ReadTimeout("sent no answer in time" if not self.head_done else "stopped in the middle of its answer")
        )
        return 0.0

    def _resume(self) -> None:
        self._paused = False
        if self.transport is not None and not self.lost:
            self.transport.resume_reading()

    # ---- asyncio's side ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one, though not by class
        self._parser = httptools.HttpResponseParser(self)

    def data_received(self, data: bytes) -> None:
        if self.done or self.fault is not None:
            self._spoil()
            return
        if self.gap:
            self.last = self._loop.time()
        if not self.head_done:
            # httptools gathers a header line until it ends: what came before this read bounds it.
            if self._head_size > MAX_HEAD:
                self._fail(BadAnswer(f"sent a head larger than {MAX_HEAD} bytes"))
                return
            self._head_size += len(data)
            self._head_reads.append(data)
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as e:
            if self.done:
                self._spoil()  # bytes after the answer: the connection serves no other request
                return
            # A callback's own fault comes as the parser error's context.
            cause = e.__context__ if isinstance(e, httptools.HttpParserCallbackError) else None
            if isinstance(cause, Fault):
                self._fail(cause)
            elif self._parser.get_status_code() == 101:
                # llhttp stops at a protocol switch (with or without an Upgrade header).
                self._fail(BadAnswer("switched protocols (101) though the gateway asked for no upgrade"))
            elif self.head_done:
                self._fail(BadAnswer("sent a body whose framing is not HTTP/1.1", detail=str(e)))
            else:
                self._fail(BadAnswer("sent an answer that is not HTTP/1.1", detail=str(e)))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.due = 0.0
        if not self.done and self.fault is None and self.transport is not None:
            if self.head_done and self._until_eof:
                self.done = True  # a body without a length ends with the connection
                self._wake()
            else:
                what = "in the middle of its answer" if self.status or self._head_size else "without answering"
                self._fail(
                    Broken(f"closed the connection {what}", detail=f"{type(exc).__name__}: {exc}" if exc else "")
                )
        self.pool.lost(self)
        # The parser holds this connection (its callbacks): let go of it, so that a closed
        # connection is freed when the last reference goes rather than by the collector.
        del self._parser

    def _spoil(self) -> None:
        """Bytes came that no request asked for (after an answer, or while idle): a backend out
        of step with its requests. Read as the next answer, they would answer another client's
        request, so the connection closes."""
        self.keep_alive = False
        if self.transport is not None:
            self.transport.close()

    # ---- httptools' callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.done:
            raise BadAnswer("sent more than one answer to one request")

    # No on_header: httptools would call into Python for every header line. The head is read
    # from the bytes it came in, once llhttp has found it well formed (on_headers_complete).

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            self._interims += 1  # an interim answer (103 Early Hints): the real one follows
            return
        head = self.raw_head = final_head(b"".join(self._head_reads), self._interims)
        self._head_reads = []
        self.status = status
        low = check_head(head)
        at = low.find(b"\ncontent-encoding:")
        if at >= 0:
            coding = low[at + 18 : low.find(b"\n", at + 18)].strip().decode("latin-1")
            if coding and coding != "identity":
                self.decoder = Decoder(coding)
        at = low.find(b"\ncontent-length:")
        if at >= 0:
            length = low[at + 16 : low.find(b"\n", at + 16)].strip()
            self.length = int(length) if length.isdigit() else None
        self._until_eof = at < 0 and b"\ntransfer-encoding:" not in low and status not in (204, 304)
        at = low.find(b"\nkeep-alive:")
        if at >= 0:
            self.keep_s = keep_for(low[at + 12 : low.find(b"\n", at + 12)])
        if not self.gap:
            self.due = self.end  # the head's deadline is met: the whole answer's is left
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._buf.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if not self.head_done:
            return  # the end of an interim answer
        self.done = True
        self.keep_alive = self._parser.should_keep_alive()
        self.due = 0.0
        self._wake()


def keep_for(value: bytes) -> float:
    """How long a connection may sit unused, given its `Keep-Alive` header's value (lower case):
    a second under the `timeout=` it announces, at most KEEP_IDLE_S; 0 when that leaves nothing."""
    for param in value.split(b","):
        name, _, n = param.partition(b"=")
        if name.strip() == b"timeout":
            try:
                return max(0.0, min(KEEP_IDLE_S, float(n.strip(b' \t\r"')) - KEEP_MARGIN_S))
            except ValueError:
                break
    return KEEP_IDLE_S
