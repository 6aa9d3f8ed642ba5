"""Fan-out: one client request answered by several upstream requests, put back together.

Two gaps share it. A batch of prompts (OpenAI and Databricks completions take a list) meets a
backend that takes one prompt per request (its outbound codec does not set `batch_prompts`);
and n > 1 choices meet a backend that generates one (its codec gives `n` the EMULATE fate).
Each sub-request then asks for one prompt and one choice, all run concurrently; choice index =
prompt position * n + choice number, OpenAI's rule. When the client gave a seed, choice i uses
seed + i, so the choices differ yet stay reproducible. Whole answers are reassembled in index
order with usage summed; streams are merged as their events arrive, each event re-indexed, and
their usage summed into one event at the end.
"""

import asyncio
import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any

from gateway.core.errors import GatewayError
from gateway.core.types import (
    Choice,
    EmbeddingResult,
    Event,
    FinishEvent,
    ReasoningDelta,
    Request,
    Result,
    Task,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageEvent,
)

if TYPE_CHECKING:
    from gateway.core.engine import Engine, EventStream
    from gateway.core.exchange import Exchange

_INDEXED = (TextDelta, ReasoningDelta, ToolCallDelta, FinishEvent)


def prompts(req: Request) -> list[Any] | None:
    """The prompts of a batch request (two or more), or None for a single prompt."""
    if req.task is not Task.COMPLETION:
        return None
    if isinstance(req.prompt, list) and len(req.prompt) > 1:
        return list(req.prompt)
    ids = req.prompt_ids
    if ids and isinstance(ids[0], list) and len(ids) > 1:
        return list(ids)
    return None


def _shape(engine: "Engine", req: Request) -> tuple[list[Any] | None, int, bool]:
    """The prompts to fan out (None: one request takes them all), n, and whether each choice
    needs its own upstream request."""
    batch = None if getattr(engine, "batch_prompts", False) else prompts(req)
    n = int(req.params.get("n", 1))
    emulate_n = n > 1 and bool(getattr(engine, "emulates_n", lambda r: False)(req))
    return batch, n, emulate_n


def width(engine: "Engine", req: Request) -> int:
    """How many upstream requests the engine will open for this request (counted, not built,
    so a request asking for an absurd number costs nothing to refuse)."""
    batch, n, emulate_n = _shape(engine, req)
    return (len(batch) if batch is not None else 1) * (n if emulate_n else 1)


def _plan(engine: "Engine", req: Request) -> tuple[list[Request], int] | None:
    """The sub-requests in choice-index order and how many choices each returns; None when
    the engine takes the request whole."""
    batch, n, emulate_n = _shape(engine, req)
    if batch is None and not emulate_n:
        return None
    subs = []
    for prompt in batch if batch is not None else [None]:
        for i in range(n if emulate_n else 1):
            params = dict(req.params)
            if emulate_n:
                del params["n"]
                if isinstance(params.get("seed"), int):
                    params["seed"] += i
            sub = dataclasses.replace(req, params=params, dropped=[])
            if prompt is not None:
                raw = {**req.raw, "prompt": prompt} if req.raw is not None and "prompt" in req.raw else req.raw
                if isinstance(prompt, str):
                    sub = dataclasses.replace(sub, prompt=prompt, prompt_ids=None, raw=raw)
                else:
                    sub = dataclasses.replace(sub, prompt=None, prompt_ids=prompt, raw=raw)
            subs.append(sub)
    return subs, 1 if emulate_n else n


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            return _first_error(e)
        if isinstance(e, GatewayError):
            return e
    return group.exceptions[0]


def _sum(usages: list[Usage | None]) -> Usage | None:
    """The total, or None unless every part reported its counts."""
    if not usages or any(u is None or u.prompt_tokens is None or u.completion_tokens is None for u in usages):
        return None
    return Usage(sum(u.prompt_tokens or 0 for u in usages if u), sum(u.completion_tokens or 0 for u in usages if u))


async def complete(engine: "Engine", req: Request, ex: "Exchange") -> Result | EmbeddingResult:
    """engine.complete(req), fanned out when the engine cannot take the request whole."""
    plan = _plan(engine, req)
    if plan is None:
        return await engine.complete(req, ex)
    subs, per_sub = plan
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(engine.complete(s, ex)) for s in subs]
    except BaseExceptionGroup as group:
        # One failed part fails the request; the client gets that part's error, not a group.
        raise _first_error(group) from None
    choices: list[Choice] = []
    usages: list[Usage | None] = []
    model = None
    for k, task in enumerate(tasks):
        r = task.result()
        assert isinstance(r, Result)
        model = model or r.model
        usages.append(r.usage)
        choices.extend(dataclasses.replace(c, index=k * per_sub + c.index) for c in r.choices)
    req.dropped = subs[0].dropped
    return Result(choices, _sum(usages), model)


async def open_stream(engine: "Engine", req: Request, ex: "Exchange") -> "EventStream":
    """engine.open_stream(req), or one stream merged from the fanned-out parts."""
    plan = _plan(engine, req)
    if plan is None:
        return await engine.open_stream(req, ex)
    subs, per_sub = plan
    opened = await asyncio.gather(*(engine.open_stream(s, ex) for s in subs), return_exceptions=True)
    streams = [s for s in opened if not isinstance(s, BaseException)]
    failed = [e for e in opened if isinstance(e, BaseException)]
    if failed:
        for s in streams:
            await s.aclose()
        raise failed[0]
    req.dropped = subs[0].dropped
    return MergedStream(streams, per_sub)


class MergedStream:
    """Several streams as one: part k's choice i becomes choice k * per_part + i."""

    def __init__(self, streams: list["EventStream"], per_part: int = 1) -> None:
        self._streams = streams
        self._per_part = per_part
        self._queue: asyncio.Queue[tuple[int, list[Event] | BaseException | None]] = asyncio.Queue()
        self._usage: list[Usage | None] = [None] * len(streams)
        self._open = len(streams)
        self._done = False
        self._tasks = [asyncio.ensure_future(self._pump(k, s)) for k, s in enumerate(streams)]

    async def _pump(self, k: int, stream: "EventStream") -> None:
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
                raise item
            out: list[Event] = []
            for ev in item:
                if isinstance(ev, UsageEvent):
                    self._usage[k] = ev.usage
                elif isinstance(ev, _INDEXED):
                    ev.index = k * self._per_part + ev.index
                    out.append(ev)
            if out:
                return out
        if self._done:
            return None
        self._done = True
        total = _sum(self._usage)
        return [UsageEvent(total)] if total is not None else None

    async def aclose(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(BaseException):
                await t
        for s in self._streams:
            await s.aclose()
