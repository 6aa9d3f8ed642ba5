"""The simulator's engine: answers from the fake model, streamed token by token."""

import asyncio
from collections.abc import Mapping

from gateway.codec.contract import BackendView, EventStream, NoOptions, Reply
from gateway.neutral.events import Event, FinishEvent, TextDelta, ToolCallDelta, UsageEvent
from gateway.neutral.types import Answer, Request, Task, Usage
from gateway.proxy import fanout
from gateway.proxy.plan import NO_HEADERS, Plan, fan_out, prompts
from gateway.simulator import model

_ITSELF = BackendView("simulator", "simulator", None, NoOptions())


class SimEngine:
    def __init__(self, token_delay_s: float = 0.0, tool_parser: str | None = None) -> None:
        self.token_delay_s = token_delay_s
        # The format its model writes tool calls in when its prompt shows tools.
        self.tool_parser = tool_parser

    def plan(
        self, req: Request, request_id: str, body_bytes: int, max_fanout: int, headers: Mapping[str, str] = NO_HEADERS
    ) -> Plan:
        # The fake model is the server: it takes every parameter as it is and makes n choices;
        # a batch of prompts is answered prompt by prompt.
        batch = prompts(req)
        parts = fan_out(req, batch, 1) if batch is not None else (req,)
        return Plan(
            request_id=request_id,
            body_bytes=body_bytes,
            backend=_ITSELF,
            parts=parts,
            per_part=req.params.choices,
            same_wire=True,
            passthrough=False,
            finish_in_band=True,
        )

    async def complete(self, plan: Plan) -> Answer:
        return await fanout.complete_parts(plan, self._complete)

    async def _complete(self, plan: Plan, req: Request) -> Answer:
        if req.task is Task.EMBEDDING:
            return model.embed(req)
        result = model.complete(req, self.tool_parser)
        if self.token_delay_s:
            longest = max(len(c.text.split()) for c in result.choices)
            await asyncio.sleep(self.token_delay_s * longest)
        return result

    async def fetch(self, path: str) -> Reply:
        # The simulator is the server itself: what it says of itself, its inbound says.
        return Reply(404, b'{"error":"not found"}')

    async def open_stream(self, plan: Plan) -> EventStream:
        return await fanout.open_parts(plan, self._open)

    async def _open(self, plan: Plan, req: Request) -> EventStream:
        return SimStream(req, self.token_delay_s, self.tool_parser)


class SimStream:
    def __init__(self, req: Request, delay: float, tool_parser: str | None = None) -> None:
        self._batches = self._plan(req, tool_parser)
        self._delay = delay

    @staticmethod
    def _plan(req: Request, tool_parser: str | None) -> list[list[Event]]:
        batches: list[list[Event]] = []
        completion = 0
        top = req.params.top_logprobs or 0
        for i in range(req.params.choices):
            g = model.generate(req, i, tool_parser)
            lps = model.logprob_entries(g.tokens, top) if req.params.logprobs else None
            for k, tok in enumerate(g.tokens):
                batches.append([TextDelta(tok, i, [lps[k]] if lps else None, [model.token_id(tok)])])
            for c, call in enumerate(g.tool_calls or ()):
                fn = call["function"]
                batches.append([ToolCallDelta(c, call["id"], fn["name"], "", i)])
                batches.append([ToolCallDelta(c, None, None, fn["arguments"], i)])
            if g.tokens and not g.tool_calls:
                batches[-1].append(FinishEvent(g.finish, i, g.stop))  # with the last token, as servers say it
            else:
                batches.append([FinishEvent(g.finish, i, g.stop)])
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
