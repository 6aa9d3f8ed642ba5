"""Fan-out: one client request answered by several upstream requests, put back together.

Two gaps share it (the plan decides, gateway.proxy.plan): a batch of prompts meets a backend that
takes one prompt per request, and n > 1 choices meet a backend that generates one. Part k's
choice i is the client's choice k * per_part + i, OpenAI's rule. Whole answers are reassembled in
index order with usage summed; streams are merged as their events arrive, each event re-indexed
(a copy: events do not change), and their usage summed into one event at the end.
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any

from gateway.codec.contract import EventStream
from gateway.neutral.errors import GatewayError
from gateway.neutral.events import INDEXED, Event, UsageEvent
from gateway.neutral.types import Answer, Choice, Request, Result, Usage
from gateway.proxy.plan import Plan


def complete_parts(plan: Plan, complete: Callable[[Plan, Request], Coroutine[Any, Any, Answer]]) -> Awaitable[Answer]:
    """Every part of the plan answered, concurrently, and put back together."""
    if plan.width == 1:
        return complete(plan, plan.parts[0])
    return _gather(plan, complete)


# A failed part's error goes up through frames that hold it (the part's task, the list of them):
# each such frame lets go of it on the way out, or the error's traceback, which holds the frame,
# and the frame would keep each other, with the request, until the collector came by.


async def _gather(plan: Plan, complete: Callable[[Plan, Request], Coroutine[Any, Any, Answer]]) -> Answer:
    tasks: list[asyncio.Task[Answer]] = []
    failure: BaseException | None = None
    try:
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(complete(plan, part)) for part in plan.parts]
        except BaseExceptionGroup as group:
            # One failed part fails the request; the client gets that part's error, not a group.
            # (Python 3.11's TaskGroup keeps the group in a cycle with its own frame: the
            # traceback that closes it goes.)
            group.__traceback__ = None
            failure = first_error(group)
        if failure is not None:
            raise failure  # outside the handler: not chained to the group that holds it
        return merge_results([t.result() for t in tasks], plan.per_part)
    finally:
        tasks, failure = [], None


async def open_parts(plan: Plan, open_: Callable[[Plan, Request], Coroutine[Any, Any, EventStream]]) -> EventStream:
    """Every part of the plan streaming, merged into one stream."""
    if plan.width == 1:
        return await open_(plan, plan.parts[0])
    opened = await asyncio.gather(*(open_(plan, p) for p in plan.parts), return_exceptions=True)
    try:
        streams = [s for s in opened if not isinstance(s, BaseException)]
        if len(streams) < len(opened):
            for s in streams:
                await s.aclose()
            raise next(e for e in opened if isinstance(e, BaseException))
        return MergedStream(streams, plan.per_part)
    finally:
        opened = []


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            return first_error(e)
        if isinstance(e, GatewayError):
            return e
    return group.exceptions[0]


def sum_usage(usages: list[Usage | None]) -> Usage | None:
    """The total, or None unless every part reported its counts."""
    if not usages or any(u is None or u.prompt_tokens is None or u.completion_tokens is None for u in usages):
        return None
    return Usage(sum(u.prompt_tokens or 0 for u in usages if u), sum(u.completion_tokens or 0 for u in usages if u))


def merge_results(parts: list[Answer], per_part: int) -> Result:
    choices: list[Choice] = []
    usages: list[Usage | None] = []
    model = None
    for k, r in enumerate(parts):
        assert isinstance(r, Result)
        model = model or r.model
        usages.append(r.usage)
        choices.extend(replace(c, index=k * per_part + c.index) for c in r.choices)
    return Result(choices, sum_usage(usages), model)


class MergedStream:
    """Several streams as one: part k's choice i becomes choice k * per_part + i."""

    def __init__(self, streams: list[EventStream], per_part: int = 1) -> None:
        self._streams = streams
        self._per_part = per_part
        self._queue: asyncio.Queue[tuple[int, list[Event] | BaseException | None]] = asyncio.Queue()
        self._usage: list[Usage | None] = [None] * len(streams)
        self._open = len(streams)
        self._done = False
        self._tasks = [asyncio.ensure_future(self._pump(k, s)) for k, s in enumerate(streams)]

    async def _pump(self, k: int, stream: EventStream) -> None:
        try:
            while (events := await stream.next()) is not None:
                await self._queue.put((k, events))
        except Exception as e:  # handed to the reader, which raises it in the exchange
            await self._queue.put((k, e))
            return
        await self._queue.put((k, None))

    async def next(self) -> list[Event] | None:
        while self._open:
            k, item = await self._queue.get()
            if item is None:
                self._open -= 1
                continue
            if isinstance(item, BaseException):
                try:
                    raise item
                finally:
                    del item
            out: list[Event] = []
            base = k * self._per_part
            for ev in item:
                if type(ev) is UsageEvent:
                    self._usage[k] = ev.usage
                elif isinstance(ev, INDEXED):
                    out.append(ev._replace(index=base + ev.index))
            if out:
                return out
        if self._done:
            return None
        self._done = True
        total = sum_usage(self._usage)
        return [UsageEvent(total)] if total is not None else None

    async def aclose(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(BaseException):
                await t
        while not self._queue.empty():
            self._queue.get_nowait()  # other parts' errors, whose tracebacks hold this stream
        for s in self._streams:
            await s.aclose()
