"""One plan per request, made once before anything is sent.

The plan says everything about how a request reaches its backend: whether the client's body
goes as it is (same wire, forwarded) or is translated; each parameter's fate, and so the
parameters kept and the hints dropped; which stop strings the gateway enforces itself; whether
it fills in token ids; and the upstream requests it fans out to. The engine carries it out;
nothing after this point decides any of it again.
"""

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from gateway.adapters.tooluse import ToolReading, tool_use
from gateway.codec.capabilities import TrimsForwarded, has
from gateway.codec.contract import BackendView, Carriage, EventStream, Outbound, Reply
from gateway.neutral.errors import InvalidRequest, Unsupported
from gateway.neutral.params import Fate, Params, default_fate, is_off
from gateway.neutral.types import Answer, Request, Task
from gateway.records import record

DROPPED_HEADER = "X-Gateway-Dropped-Params"
# The request headers of the Gateway API Inference Extension that a pool puts on a request for
# its model server: the objective, the fairness id, the model-name rewrite (the llm-d router's
# names and the extension's older ones, which it still reads) and the endpoint the picker chose.
# They are passed on to the backend as they came; no other client header is, but the request id.
POOL_HEADERS = (
    "x-llm-d-inference-objective",
    "x-gateway-inference-objective",
    "x-llm-d-inference-fairness-id",
    "x-gateway-inference-fairness-id",
    "x-llm-d-model-name-rewrite",
    "x-gateway-model-name-rewrite",
    "x-gateway-destination-endpoint",
)
NO_HEADERS: Mapping[str, str] = MappingProxyType({})
NO_FATES: Mapping[str, Fate] = MappingProxyType({})


def pool_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    """The Inference Extension's headers among a client's (a case-insensitive mapping)."""
    found: dict[str, str] | None = None
    for name in POOL_HEADERS:
        value = headers.get(name)
        if value is not None:
            if found is None:
                found = {}
            found[name] = value
    return NO_HEADERS if found is None else found


def fate_of(name: str, value: Any, fates: Mapping[str, Fate]) -> Fate | None:
    """What becomes of one parameter the client set, under the policy's `fates`; None when it is
    set to its "off" value (an empty list or mapping; False) and so left out: such a value is
    never a reason to refuse or to name a drop. False stays where the backend maps it or the
    gateway emulates it, because there it can mean something (do_sample false is greedy)."""
    fate = fates.get(name) or default_fate(name)
    if is_off(value) and (value is not False or fate not in (Fate.MAP, Fate.EMULATE)):
        return None
    return fate


def apply_policy(
    params: Params, fates: Mapping[str, Fate], backend: str, dialect: str
) -> tuple[Params, tuple[str, ...]]:
    """The parameters a backend gets, and the hints dropped for it; Unsupported for refused ones."""
    removed: dict[str, Any] = {}
    dropped: list[str] = []
    refused: list[str] = []
    for name, value in params.items():
        fate = fate_of(name, value, fates)
        if fate is None:
            removed[name] = None
        elif fate is Fate.DROP:
            removed[name] = None
            dropped.append(name)
        elif fate is Fate.REFUSE:
            refused.append(name)
    if refused:
        names = ", ".join(sorted(refused))
        raise Unsupported(
            f"backend {backend!r} ({dialect}) cannot honour: {names}; "
            "remove them from the request or route it to a backend that supports them",
            param=sorted(refused)[0],
            code="unsupported_parameter",
        )
    return (params.replace(**removed) if removed else params), tuple(sorted(dropped))


def policy(carried: Mapping[str, Fate], params: Params) -> tuple[dict[str, Fate], bool]:
    """The fates the parameter policy applies, from those a backend's codec gives (`carried`,
    its carriage's), with the gateway's choices on stop strings made; and whether the gateway
    cuts at stop strings the backend would take but cannot keep in the text."""
    fates = dict(carried)
    keep = params.include_stop_str_in_output
    stops_here = bool(
        keep and params.stop and fates.get("stop") is Fate.MAP and "include_stop_str_in_output" not in fates
    )
    if stops_here:
        # The backend would stop at the strings but cannot keep them in the text: the gateway
        # cuts instead, and the backend is not told (it would remove them).
        fates["stop"] = Fate.EMULATE
    if fates.get("stop") is Fate.EMULATE:
        # Whoever cuts at stop strings also decides whether the stop text stays.
        fates.setdefault("include_stop_str_in_output", Fate.EMULATE)
    return fates, stops_here


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


@record(kw_only=True)
class Plan:
    """How one client request reaches its backend."""

    request_id: str
    body_bytes: int  # the client's body: large requests are prepared off the event loop
    backend: BackendView[Any]
    # The upstream requests, in choice-index order: part k's choice i is the client's choice
    # k * per_part + i. One part unless the request fans out.
    parts: tuple[Request, ...]
    per_part: int
    # The client spoke the backend's own wire; with `passthrough` its body goes as it is and the
    # answer comes back as it came (else it is translated like any other).
    same_wire: bool
    passthrough: bool
    variant: str = ""  # the outbound codec's own choice, made once (MindIE's endpoint)
    # The backend finishes a choice in the event with its last token (Carriage.finish_in_band).
    finish_in_band: bool = False
    dropped: tuple[str, ...] = ()
    # Stop strings the gateway enforces itself, and whether their text stays in the output.
    stops: tuple[str, ...] | None = None
    include_stop: bool = False
    # Token ids the client's dialect reports are filled in with the backend's tokenizer.
    fill_token_ids: bool = False
    # How the answers are read for the tool calls the model wrote as text (None: as they are);
    # it also counts the calls that did not parse.
    tools: ToolReading | None = None
    # When each upstream request went out and came back: the engine's record of carrying out
    # the plan, read by whoever observes the exchange.
    times: "UpstreamTimes" = field(default_factory=lambda: UpstreamTimes())
    # Client headers every upstream request carries (the Inference Extension's: POOL_HEADERS).
    headers: Mapping[str, str] = field(default_factory=lambda: NO_HEADERS)
    # The fates of the parameter policy (`policy`; each parameter's is `fate_of` it). On a
    # pass-through, which the policy does not touch, the codec's own (Carriage.fates).
    fates: Mapping[str, Fate] = field(default_factory=lambda: NO_FATES)

    @property
    def width(self) -> int:
        return len(self.parts)


@dataclass(slots=True)
class UpstreamTimes:
    """When each upstream request of one plan started and finished (time.perf_counter())."""

    spans: list[list[float]] = field(default_factory=list)

    def started(self, at: float) -> int:
        self.spans.append([at, 0.0])
        return len(self.spans) - 1

    def ended(self, span: int, at: float) -> None:
        if not self.spans[span][1]:
            self.spans[span][1] = at

    def total(self, now: float) -> float:
        """From the first upstream request sent to the last one done (or now, if one is not)."""
        if not self.spans:
            return 0.0
        return max(end or now for _, end in self.spans) - min(start for start, _ in self.spans)


class Engine(Protocol):
    """What produces answers for a route: the proxy engine asks a backend over HTTP. It makes
    each request's plan, then carries it out."""

    def plan(
        self, req: Request, request_id: str, body_bytes: int, max_fanout: int, headers: Mapping[str, str] = NO_HEADERS
    ) -> Plan: ...

    def complete(self, plan: Plan) -> Awaitable[Answer]: ...

    async def open_stream(self, plan: Plan) -> EventStream: ...

    async def fetch(self, path: str) -> Reply:
        """A GET of the backend's own (metadata, model lists): status and body as they came."""
        ...


def make_plan(
    codec: Outbound[Any],
    backend: BackendView[Any],
    req: Request,
    request_id: str,
    body_bytes: int,
    max_fanout: int,
    headers: Mapping[str, str] = NO_HEADERS,
) -> Plan:
    """The plan for `req` on a backend of `codec`'s dialect; InvalidRequest when it would fan out
    to more than `max_fanout` upstream requests, Unsupported when a parameter cannot be carried.
    `headers`: the client's headers that go upstream as they came (`pool_headers`)."""
    carriage = codec.carriage(req, backend)
    same_wire = bool(carriage.wire) and req.wire == carriage.wire
    if same_wire and codec.forwards_same_wire:
        dropped: tuple[str, ...] = ()
        if has(codec, TrimsForwarded) and req.raw is not None and codec.trims(req):
            # What the backend's servers lack is dropped (or refused) from a forwarded body too:
            # a public API refuses a field it does not know (a vLLM-style `top_k`).
            params, dropped = apply_policy(req.params, carriage.fates, backend.name, backend.dialect)
            if dropped:
                req = req.but(params=params, raw=codec.trimmed(req, dropped))
        return Plan(
            request_id=request_id,
            body_bytes=body_bytes,
            backend=backend,
            parts=(req,),
            per_part=1,
            same_wire=True,
            passthrough=True,
            variant=carriage.variant,
            finish_in_band=carriage.finish_in_band,
            dropped=dropped,
            headers=headers,
            fates=carriage.fates,
        )
    refuse_parts(req, carriage, backend)
    params, tool_fates, tools = tool_use(req.params, carriage, backend)
    fates, stops_here = policy({**carriage.fates, **tool_fates} if tool_fates else carriage.fates, params)
    emulated_stop = fates.get("stop") is Fate.EMULATE
    params, dropped = apply_policy(params, fates, backend.name, backend.dialect)
    stops = params.stop if emulated_stop and params.stop else None
    if stops_here:
        params = params.replace(stop=None)
    if params is not req.params:
        req = req.but(params=params)
    batch = None if codec.batch_prompts else prompts(req)
    n = params.choices
    emulate_n = n > 1 and fates.get("n") is Fate.EMULATE
    width = (len(batch) if batch is not None else 1) * (n if emulate_n else 1)
    if width > max_fanout:
        raise InvalidRequest(
            f"This request would take {width} upstream requests (prompts x choices) and the limit is "
            f"{max_fanout}; send fewer prompts or choices",
            param="n",
            code="too_many_choices",
        )
    parts = fan_out(req, batch, n if emulate_n else 1) if width > 1 else (req,)
    return Plan(
        request_id=request_id,
        body_bytes=body_bytes,
        backend=backend,
        parts=parts,
        per_part=1 if emulate_n else n,
        same_wire=same_wire,
        passthrough=False,
        variant=carriage.variant,
        finish_in_band=carriage.finish_in_band,
        dropped=dropped,
        stops=stops,
        include_stop=bool(params.include_stop_str_in_output),
        fill_token_ids=req.wants_token_ids and bool(backend.tokenizer) and not same_wire,
        tools=tools,
        headers=headers,
        fates=fates,
    )


def refuse_parts(req: Request, carriage: Carriage, backend: BackendView[Any]) -> None:
    """Unsupported for a message with a content part the backend's wire cannot carry: a part
    is never left out on the way (an image the model did not see would be answered as if seen)."""
    allowed = carriage.parts
    if allowed is None or not req.messages:
        return
    for m in req.messages:
        if isinstance(m.content, list):
            for part in m.content:
                kind = part.get("type")
                if kind not in allowed:
                    raise Unsupported(
                        f"backend {backend.name!r} ({backend.dialect}) cannot take {kind!r} content parts: "
                        f"its wire carries {', '.join(sorted(allowed))} only; send those, or route the "
                        "request to a backend that takes such parts",
                        param="messages",
                        code="unsupported_content",
                    )


def fan_out(req: Request, batch: list[Any] | None, n: int) -> tuple[Request, ...]:
    """One request per prompt and choice, copies of `req`. Choice i of a seeded request gets
    seed + i, so the choices differ yet stay reproducible."""
    parts = []
    for prompt in batch if batch is not None else [None]:
        base = req
        if prompt is not None:
            raw = {**req.raw, "prompt": prompt} if req.raw is not None and "prompt" in req.raw else req.raw
            text = isinstance(prompt, str)
            base = req.but(prompt=prompt if text else None, prompt_ids=None if text else prompt, raw=raw)
        for i in range(n):
            if n == 1:
                parts.append(base)
                continue
            p = base.params
            seed = p.seed + i if p.seed is not None else None
            parts.append(base.but(params=p.replace(n=None, seed=seed)))
    return tuple(parts)
