"""The simulator's engine: answers from the fake model, streamed token by token."""

import asyncio
from typing import TYPE_CHECKING

from gateway.core.types import (
    EmbeddingResult,
    Event,
    FinishEvent,
    Request,
    Result,
    Task,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageEvent,
)
from gateway.simulator import model

if TYPE_CHECKING:
    from gateway.core.exchange import Exchange


class SimEngine:
    def __init__(self, token_delay_s: float = 0.0) -> None:
        self.token_delay_s = token_delay_s

    @property
    def passthrough_dialect(self) -> str | None:
        return None

    async def complete(self, req: Request, ex: "Exchange") -> Result | EmbeddingResult:
        if req.task is Task.EMBEDDING:
            return model.embed(req)
        result = model.complete(req)
        if self.token_delay_s:
            longest = max(len(c.text.split()) for c in result.choices)
            await asyncio.sleep(self.token_delay_s * longest)
        return result

    async def open_stream(self, req: Request, ex: "Exchange") -> "SimStream":
        return SimStream(req, self.token_delay_s)


class SimStream:
    def __init__(self, req: Request, delay: float) -> None:
        self._batches = self._plan(req)
        self._delay = delay

    @staticmethod
    def _plan(req: Request) -> list[list[Event]]:
        batches: list[list[Event]] = []
        n = int(req.params.get("n", 1))
        completion = 0
        top = int(req.params.get("top_logprobs", 0))
        for i in range(n):
            g = model.generate(req, i)
            lps = model.logprob_entries(g.tokens, top) if req.params.get("logprobs") else None
            for k, tok in enumerate(g.tokens):
                batches.append([TextDelta(tok, i, [lps[k]] if lps else None, [model.token_id(tok)])])
            for c, call in enumerate(g.tool_calls or ()):
                fn = call["function"]
                batches.append([ToolCallDelta(c, call["id"], fn["name"], "", i)])
                batches.append([ToolCallDelta(c, None, None, fn["arguments"], i)])
            batches.append([FinishEvent(g.finish, i)])
            completion += len(g.tokens) or (1 if g.tool_calls else 0)
        prompt = model.count_prompt_tokens(req)
        batches[-1].append(UsageEvent(Usage(prompt, completion)))
        # The prompt's count is known before generating, and some servers report it on every
        # event (Triton's vLLM backend): say it up front.
        batches[0].insert(0, UsageEvent(Usage(prompt, None)))
        batches.reverse()
        return batches

    async def next(self) -> list[Event] | None:
        if not self._batches:
            return None
        if self._delay:
            await asyncio.sleep(self._delay)
        return self._batches.pop()

    async def aclose(self) -> None:
        self._batches.clear()
