"""What all requests together may hold at once, and what each one holds.

A backend may also have a `Gate` of its own (`backends.X.max_concurrent`), where requests wait
their turn (`priority_of` says what it is). Two budgets are process-wide: upstream request
slots (`limits.max_concurrent_requests`; a fanned-out request takes one slot per upstream
request it opens) and request-body bytes held in memory (`limits.max_buffered_body_bytes`). A
request reserves room for its body before the body is read, so a flood of slow or unfinished
bodies is turned away with a 503 instead of filling memory, and takes its first slot only once
the body is whole, so that slow bodies hold no slot other requests could use. A body still
arriving also counts against its client's share (`limits.max_unfinished_bodies_per_client`).
Everything a request took comes back in one `release`.
"""

import asyncio
import heapq
import itertools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from gateway.neutral.errors import Overloaded, RateLimited
from gateway.neutral.types import Request


@dataclass(slots=True)
class Ticket:
    """What one request holds."""

    slots: int = 0
    body_bytes: int = 0


class Budget:
    __slots__ = ("arriving", "body_bytes", "max_arriving", "max_body_bytes", "max_slots", "slots")

    def __init__(self, max_slots: int, max_body_bytes: int, max_arriving: int) -> None:
        self.max_slots = max_slots
        self.max_body_bytes = max_body_bytes
        self.max_arriving = max_arriving  # per client
        self.slots = 0
        self.body_bytes = 0
        # Client -> its bodies still arriving; a client with none has no entry.
        self.arriving: dict[str | None, int] = {}

    def take_slots(self, ticket: Ticket, n: int) -> None:
        if n <= 0:
            return
        if self.slots + n > self.max_slots:
            raise Overloaded("The gateway is at its concurrent request limit; retry later")
        self.slots += n
        ticket.slots += n

    def reserve_body(self, ticket: Ticket, n: int) -> None:
        """Room for a body of up to `n` bytes, before it is read."""
        extra = n - ticket.body_bytes
        if extra > 0 and self.body_bytes + extra > self.max_body_bytes:
            raise Overloaded("The gateway holds as many request bodies as it may at once; retry later")
        self.settle_body(ticket, n)

    def settle_body(self, ticket: Ticket, n: int) -> None:
        """The body's real size, once read (a decompressed body may exceed its reservation)."""
        self.body_bytes += n - ticket.body_bytes
        ticket.body_bytes = n

    @contextmanager
    def arrival(self, client: str | None) -> Iterator[None]:
        """A body of `client`'s on its way, for as long as the block runs; RateLimited (before a
        byte of it is read) when the client already has as many on their way as it may."""
        n = self.arriving.get(client, 0)
        if n >= self.max_arriving:
            raise RateLimited(
                f"This client is already sending {n} request bodies, the most it may send at once; "
                "finish one before starting another"
            )
        self.arriving[client] = n + 1
        try:
            yield
        finally:
            n = self.arriving[client] - 1
            if n:
                self.arriving[client] = n
            else:
                del self.arriving[client]

    def release(self, ticket: Ticket) -> None:
        self.slots -= ticket.slots
        self.body_bytes -= ticket.body_bytes
        ticket.slots = ticket.body_bytes = 0


class Gate:
    """One backend's own admission: at most `limit` upstream requests in flight, the rest waiting
    in a queue of at most `max_queued`, served by priority (1 first) and then by arrival. A
    request that cannot be queued, or waits longer than `timeout_s`, gets a 429 with
    Retry-After; one whose client leaves while it waits leaves the queue at once (its task is
    cancelled, and so is its wait)."""

    __slots__ = ("_heap", "_on_queue", "_seq", "in_flight", "limit", "max_queued", "name", "queued", "timeout_s")

    def __init__(
        self,
        name: str,
        limit: int,
        max_queued: int,
        timeout_s: float,
        on_queue: Callable[[int], None] | None = None,
    ) -> None:
        self.name = name
        self.limit = limit
        self.max_queued = max_queued
        self.timeout_s = timeout_s
        self.in_flight = 0
        self.queued = 0
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._on_queue = on_queue

    async def enter(self, n: int, priority: int) -> int:
        """Take n slots (at most the whole limit: a wider request waits for all of them); the
        number taken, to give back with `leave`."""
        n = min(max(n, 1), self.limit)
        if not self._heap and self.in_flight + n <= self.limit:
            self.in_flight += n
            return n
        if self.queued >= self.max_queued:
            raise RateLimited(f"backend {self.name!r} is at its concurrency limit and its queue is full; retry later")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (priority, next(self._seq), waiter)
        heapq.heappush(self._heap, entry)
        self._count(1)
        try:
            async with asyncio.timeout(self.timeout_s):
                while True:
                    await waiter
                    if self.in_flight + n <= self.limit:
                        break
                    # Woken, but the room went to another (or is short for a wide request):
                    # back in the queue, in the same place.
                    waiter = asyncio.get_running_loop().create_future()
                    entry = (entry[0], entry[1], waiter)
                    heapq.heappush(self._heap, entry)
            self.in_flight += n
        except TimeoutError:
            raise RateLimited(
                f"backend {self.name!r} is at its concurrency limit; waited {self.timeout_s:g}s for a slot"
            ) from None
        finally:
            self._count(-1)
            if entry in self._heap:
                self._heap.remove(entry)
                heapq.heapify(self._heap)
            # Whether it got in (the next may fit too) or gave up after being woken (the room it
            # was woken for is still free): the next in line is woken.
            self._wake()
        return n

    def watch(self, on_queue: Callable[[int], None]) -> None:
        """Have `on_queue` told the queue's length whenever it changes."""
        self._on_queue = on_queue
        on_queue(self.queued)

    def leave(self, n: int) -> None:
        self.in_flight -= n
        self._wake()

    def _wake(self) -> None:
        """Wake the first waiter while there is room; it takes its slots itself."""
        while self._heap and self.in_flight < self.limit:
            _, _, waiter = heapq.heappop(self._heap)
            if not waiter.done():
                waiter.set_result(None)
                return

    def _count(self, d: int) -> None:
        self.queued += d
        if self._on_queue is not None:
            self._on_queue(self.queued)


# What a client may say of a request's turn where its dialect has no word for it (MindIE's
# `priority` is the same scale: 1 first, 5 last).
PRIORITY_HEADER = "X-Gateway-Priority"
DEFAULT_PRIORITY = 3


# The Inference Extension's objective header (the llm-d router's name, then the extension's own)
# names an InferenceObjective, whose priority goes the other way (higher first, 0 when unset). It
# is put on this scale so that both defaults meet: priority p ranks as 3 - p (1 as 2, 10 before
# any X-Gateway-Priority, -1 as 4).
OBJECTIVE_HEADERS = ("x-llm-d-inference-objective", "x-gateway-inference-objective")


def priority_of(headers: Mapping[str, str], req: Request, objectives: Mapping[str, int] | None = None) -> int:
    """A request's place in its backend's queue, lowest first: the priority of the objective its
    objective header names (when `objectives` knows it), else MindIE's `priority`, else
    X-Gateway-Priority, else 3."""
    if objectives:
        for header in OBJECTIVE_HEADERS:
            named = headers.get(header)
            if named is not None and named in objectives:
                return DEFAULT_PRIORITY - objectives[named]
    if req.params.priority is not None:
        return req.params.priority
    given = headers.get(PRIORITY_HEADER, "")
    return int(given) if given in ("1", "2", "3", "4", "5") else DEFAULT_PRIORITY
