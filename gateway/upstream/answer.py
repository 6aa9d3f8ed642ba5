"""A backend's answer as the pool hands it over: its head read, its body read whole or as it
comes, and then its connection given back or cut."""

from __future__ import annotations

import asyncio
from typing import Protocol

from gateway.upstream.budget import AnswerBudget
from gateway.upstream.connection import Connection
from gateway.upstream.head import Headers

# A body already all there (decoded from a small compressed one) is read without waiting on the
# socket, so without a turn of the event loop: one is given every this many bytes.
YIELD_EVERY = 1024 * 1024


class Giver(Protocol):
    """Where an answer's connection goes back: its pool."""

    def done(self, conn: Connection, keep: bool) -> None:
        """The answer is done with `conn`: kept for the next request, or closed."""


class Answer:
    """A backend's answer, its head read. The body is read whole (`read`) or as it comes
    (`chunk`); then `release` gives the connection back, or `close` cuts it (and with it the
    backend's work on the request)."""

    __slots__ = ("_budget", "_conn", "_held", "_pool", "content_length", "headers", "status")

    def __init__(self, pool: Giver, conn: Connection) -> None:
        self._pool = pool
        self._conn: Connection | None = conn
        self.status = conn.status
        self.content_length = conn.length
        self.headers = Headers(conn.raw_head)
        self._held = 0  # what `read` took of its budget (`_budget`, then), given back with the connection

    async def chunk(self) -> bytes:
        """The body bytes that have come since the last call (decoded), at least one unless the
        body has ended: then b""."""
        conn = self._conn
        if conn is None:
            return b""
        return await conn.take()

    @property
    def ended(self) -> bool:
        """Whether the body has all come and been taken: `chunk` says b"" without a wait."""
        conn = self._conn
        return conn is None or conn.drained()

    async def read(self, limit: int, budget: AnswerBudget | None = None) -> bytes | None:
        """The whole body, decoded; None when it is longer than `limit` bytes (nothing more is
        read, and `release` will close the connection). The event loop gets a turn every
        YIELD_EVERY bytes, and a body longer than that holds room in `budget` until the answer
        is released or closed (OverBudget when there is none)."""
        conn = self._conn
        if conn is None:
            return b""
        length = self.content_length
        if conn.decoder is None and length is not None and length > limit:
            return None
        parts: list[bytes] = []
        size = 0
        turn = YIELD_EVERY
        while piece := await conn.take():
            size += len(piece)
            if size > limit:
                return None
            parts.append(piece)
            if size >= turn:
                turn += YIELD_EVERY
                if budget is not None:
                    budget.take(size - self._held)
                    self._budget: AnswerBudget = budget
                    self._held = size
                await asyncio.sleep(0)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def prefix(self, n: int) -> bytes:
        """The body's first `n` bytes (all of it, when shorter), waited for as they come."""
        conn = self._conn
        parts: list[bytes] = []
        size = 0
        while conn is not None and size < n and (piece := await conn.take()):
            parts.append(piece)
            size += len(piece)
        return b"".join(parts)[:n]

    def release(self) -> None:
        """Done with the answer: the connection goes back to the pool if it can serve another
        request, else it closes."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.done(conn, conn.reusable())
        if self._held:
            self._give()

    def close(self) -> None:
        """Done with the answer, read or not: the connection closes."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.done(conn, False)
        if self._held:
            self._give()

    def _give(self) -> None:
        self._budget.give(self._held)
        self._held = 0
