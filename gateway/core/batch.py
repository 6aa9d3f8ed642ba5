"""Batch completions: a list of prompts in one request, for backends that take one at a time.

Databricks and OpenAI clients may send `prompt` as a list. An engine whose backend takes the
list as it is (its outbound codec sets `batch_prompts = True`) gets the request unchanged; any
other engine gets one request per prompt, run concurrently, and the answers are put back
together with choice index = prompt position * n + choice number (OpenAI's rule, which is
Databricks' "index of the prompt" when n is 1). Streaming a fanned-out batch is refused: the
interleaving of several upstream streams into one would be the gateway's invention.
"""

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from gateway.core.errors import GatewayError, InvalidRequest
from gateway.core.types import Choice, EmbeddingResult, Request, Result, Task, Usage

if TYPE_CHECKING:
    from gateway.core.engine import Engine
    from gateway.core.exchange import Exchange


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


def takes_batch(engine: "Engine") -> bool:
    return bool(getattr(engine, "batch_prompts", False))


def check_stream(engine: "Engine", req: Request) -> None:
    if req.stream and prompts(req) is not None and not takes_batch(engine):
        raise InvalidRequest(
            "Streaming a batch of prompts is not supported on this route: its backend takes one prompt per "
            "request. Send the prompts one by one, or set stream to false.",
            param="prompt",
            code="batch_stream_unsupported",
        )


def _single(req: Request, prompt: Any) -> Request:
    raw = req.raw
    if raw is not None and "prompt" in raw:
        raw = {**raw, "prompt": prompt}
    if isinstance(prompt, str):
        return dataclasses.replace(req, prompt=prompt, prompt_ids=None, params=dict(req.params), raw=raw, dropped=[])
    return dataclasses.replace(req, prompt=None, prompt_ids=prompt, params=dict(req.params), raw=raw, dropped=[])


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            return _first_error(e)
        if isinstance(e, GatewayError):
            return e
    return group.exceptions[0]


def _sum(values: list[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


async def complete(engine: "Engine", req: Request, ex: "Exchange") -> Result | EmbeddingResult:
    """engine.complete(req), fanning a batch out when the engine cannot take it whole."""
    batch = prompts(req)
    if batch is None or takes_batch(engine):
        return await engine.complete(req, ex)
    subs = [_single(req, p) for p in batch]
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(engine.complete(s, ex)) for s in subs]
    except BaseExceptionGroup as group:
        # One failed prompt fails the batch; the client gets that prompt's error, not a group.
        raise _first_error(group) from None
    n = int(req.params.get("n", 1))
    choices: list[Choice] = []
    usages: list[Usage | None] = []
    model = None
    for pos, task in enumerate(tasks):
        r = task.result()
        assert isinstance(r, Result)
        model = model or r.model
        usages.append(r.usage)
        for c in r.choices:
            choices.append(dataclasses.replace(c, index=pos * n + c.index))
    req.dropped = subs[0].dropped
    usage = None
    if all(u is not None for u in usages):
        usage = Usage(
            _sum([u.prompt_tokens for u in usages if u is not None]),
            _sum([u.completion_tokens for u in usages if u is not None]),
        )
    return Result(choices, usage, model)
