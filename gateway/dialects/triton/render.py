"""Triton generate answers as clients expect them: one JSON object, or SSE `data: ` events.

The answer is `{id?, model_name, model_version, text_output}`; a stream is one event per text
delta, with no terminator: it ends when the connection closes. A client may ask for the vLLM
backend's outputs (`return_finish_reason`, `return_num_input_tokens`, `return_num_output_tokens`);
they are added when the gateway knows them, never guessed. As the vLLM backend does, a stream
then carries `finish_reason: "None"` until its last event, so the last text event is held back
until the stream ends.

When a simulator serves the request (`ctx.server`, see servers.py), the answer is the imitated
server's own: TRT-LLM's sequence fields and `output_log_probs`, the vLLM outputs, MindIE's
`details`, `model_version: null` and `data:` framing without a space.
"""

import time
from dataclasses import dataclass
from typing import Any

from gateway import jsonutil
from gateway.core.errors import GatewayError
from gateway.core.finish import TGI
from gateway.core.types import (
    Choice,
    EmbeddingResult,
    Event,
    Finish,
    FinishEvent,
    Request,
    Result,
    TextDelta,
    Usage,
    UsageEvent,
)
from gateway.dialects.base import RenderContext
from gateway.dialects.triton import servers
from gateway.dialects.triton.schema import flag

_dumps = jsonutil.dumps
DEFAULT_VERSION = "1"
# The vLLM backend reports str() of vLLM's own reason: "stop", "length" or "abort".
VLLM_FINISH: dict[Finish, str] = {
    Finish.EOS: "stop",
    Finish.STOP_STRING: "stop",
    Finish.STOP_TOKEN: "stop",
    Finish.LENGTH: "length",
    Finish.TOOL_CALLS: "stop",
    Finish.CONTENT_FILTER: "stop",
    Finish.ABORT: "abort",
    Finish.ERROR: "abort",
    Finish.UNKNOWN: "stop",
}


@dataclass(slots=True)
class Shape:
    """What one request's answer holds besides its text; worked out once per request."""

    head: dict[str, Any]
    frame: bytes
    echo: str = ""  # prepended to a whole answer (servers that return the prompt by default)
    finish: bool = False
    n_in: bool = False
    n_out: bool = False
    trtllm: bool = False
    details: bool = False

    @property
    def plain(self) -> bool:
        return not (self.finish or self.n_in or self.n_out or self.trtllm or self.details)


def shape(req: Request, ctx: RenderContext) -> Shape:
    flavor = servers.flavor_of(ctx.server)
    raw = req.raw or {}
    head: dict[str, Any] = {}
    raw_id = raw.get("id")
    if isinstance(raw_id, str):
        head["id"] = raw_id
    elif flavor == "mindie":
        head["id"] = ctx.request_id  # MindIE answers with its own id when the client gave none
    head["model_name"] = req.model or ctx.model
    head["model_version"] = None if flavor == "mindie" else req.path_params.get("version", DEFAULT_VERSION)
    s = Shape(head, b"data:" if flavor == "mindie" else b"data: ")
    if flavor in ("trtllm", "vllm") and not req.stream and not flag(raw, "exclude_input_in_output"):
        s.echo = req.prompt if isinstance(req.prompt, str) else ""
    if flavor in (None, "vllm"):
        s.finish = flag(raw, "return_finish_reason")
        s.n_in = flag(raw, "return_num_input_tokens")
        s.n_out = flag(raw, "return_num_output_tokens")
    s.trtllm = flavor == "trtllm"
    s.details = flavor == "mindie" and flag(raw, "details")
    return s


def _tensor(values: list[float]) -> float | list[float]:
    """Triton unwraps an output tensor of exactly one element to a scalar."""
    return values[0] if len(values) == 1 else values


def _log_probs(entries: Any, n: int) -> list[float]:
    if isinstance(entries, list) and entries:
        return [float(e.get("logprob", 0.0)) for e in entries if isinstance(e, dict)]
    return [0.0] * n  # TRT-LLM fills the tensor with zeros when log probs were not asked for


def render_result(result: Result | EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(result, Result)
    s = shape(req, ctx)
    choice = result.choices[0] if result.choices else Choice()
    usage = result.usage or Usage()
    out = dict(s.head)
    generated = usage.completion_tokens
    if generated is None and choice.token_ids is not None:
        generated = len(choice.token_ids)
    if s.trtllm:
        lps = _log_probs(choice.logprobs, generated or 0)
        out.update(sequence_end=False, sequence_id=0, sequence_start=False, cum_log_probs=round(sum(lps), 6))
        out.update(output_log_probs=_tensor(lps), context_logits=0.0, generation_logits=0.0)
    out["text_output"] = s.echo + choice.text
    if s.finish and choice.finish is not None:
        out["finish_reason"] = VLLM_FINISH[choice.finish]
    if s.n_in and usage.prompt_tokens is not None:
        out["num_input_tokens"] = usage.prompt_tokens
    if s.n_out and generated is not None:
        out["num_output_tokens"] = generated
    if s.details:
        details: dict[str, Any] = {}
        if choice.finish is not None:
            details["finish_reason"] = TGI[choice.finish]
        details.update(generated_tokens=generated, first_token_cost=None, decode_cost=None)
        details.update(batch_size=[1, 1], queue_wait_time=[0, 0])
        out["details"] = details
    return _dumps(out)


def error_event(err: GatewayError) -> bytes:
    return b"data: " + _dumps({"error": err.message}) + b"\n\n"


def _ms(seconds: float) -> int:
    return max(int(seconds * 1000.0), 0)


class TritonStreamRenderer:
    """Each text delta becomes `data: {id?, model_name, model_version, text_output, ...}`."""

    content_type = "text/event-stream; charset=utf-8"

    def __init__(self, req: Request, ctx: RenderContext) -> None:
        self._s = s = shape(req, ctx)
        self._plain = s.plain
        # Fields only the last event can carry (a finish reason, totals) hold it back.
        self._hold = s.finish or s.n_in or s.n_out or s.details
        self._prefix = s.frame + _dumps(s.head)[:-1] + b',"text_output":'
        self._started = ctx.started
        self._pending: TextDelta | None = None
        self._finish: Finish | None = None
        self._usage: Usage | None = None
        self._prompt_tokens: int | None = None
        self._reported = 0  # num_output_tokens sent so far
        self._generated = 0  # MindIE's running generated_tokens
        self._last = 0.0
        self._sent = False
        self._failed = False

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        parts = []
        for ev in events:
            t = type(ev)
            if t is TextDelta:
                assert isinstance(ev, TextDelta)
                if ev.index != 0 or not ev.text:
                    continue
                if self._plain:
                    parts.append(self._prefix + _dumps(ev.text) + b"}\n\n")
                elif self._hold:
                    if self._pending is not None:
                        parts.append(self._event(self._pending, final=False))
                    self._pending = ev
                else:
                    parts.append(self._event(ev, final=False))
            elif t is FinishEvent:
                assert isinstance(ev, FinishEvent)
                if ev.index == 0:
                    self._finish = ev.reason
            elif t is UsageEvent:
                assert isinstance(ev, UsageEvent)
                self._usage = ev.usage
                if ev.usage.prompt_tokens is not None:
                    # Some engines (the vLLM backend) know the prompt's count before generating.
                    self._prompt_tokens = ev.usage.prompt_tokens
        if parts:
            self._sent = True
        return b"".join(parts)

    def _event(self, ev: TextDelta | None, final: bool) -> bytes:
        s = self._s
        out = dict(s.head)
        tokens = len(ev.token_ids) if ev is not None and ev.token_ids is not None else None
        if s.trtllm:
            count = tokens if tokens is not None else (1 if ev is not None else 0)
            lps = _log_probs(ev.logprobs if ev is not None else None, count)
            out.update(sequence_end=False, sequence_id=0, sequence_start=False, output_log_probs=_tensor(lps))
        out["text_output"] = ev.text if ev is not None else ""
        usage = self._usage if final else None
        if s.finish:
            if not final:
                out["finish_reason"] = "None"
            elif self._finish is not None:
                out["finish_reason"] = VLLM_FINISH[self._finish]
        if s.n_in and self._prompt_tokens is not None:
            out["num_input_tokens"] = self._prompt_tokens
        if s.n_out:
            n_out = tokens
            if usage is not None and usage.completion_tokens is not None:
                n_out = max(usage.completion_tokens - self._reported, 0)  # the rest, so the sum is the total
            if n_out is not None:
                out["num_output_tokens"] = n_out
                self._reported += n_out
        if s.details:
            self._mindie_details(out, tokens, usage, final)
        return s.frame + _dumps(out) + b"\n\n"

    def _mindie_details(self, out: dict[str, Any], tokens: int | None, usage: Usage | None, final: bool) -> None:
        self._generated += tokens or 0
        details: dict[str, Any] = {}
        if final and self._finish is not None:
            details["finish_reason"] = TGI[self._finish]  # only the last event has one
        gen = usage.completion_tokens if usage is not None and usage.completion_tokens is not None else self._generated
        details.update(generated_tokens=gen, batch_size=1, queue_wait_time=0)
        out["details"] = details
        now = time.perf_counter()
        first = not self._last
        out["prefill_time"] = _ms(now - self._started) if first and self._started else (0 if first else None)
        out["decode_time"] = None if first else _ms(now - self._last)
        self._last = now

    def error(self, err: GatewayError) -> bytes:
        self._failed = True
        head = b""
        if self._pending is not None:
            head, self._pending = self._event(self._pending, final=False), None
        return head + error_event(err)

    def end(self) -> bytes:
        if self._failed:
            return b""
        if self._pending is not None:
            ev, self._pending = self._pending, None
            return self._event(ev, final=True)
        # A model that generated nothing still answers once, as Triton does with its final response.
        if not self._sent:
            return self._prefix + b'""}\n\n' if self._plain else self._event(None, final=True)
        return b""


def stream_renderer(req: Request, ctx: RenderContext) -> TritonStreamRenderer:
    return TritonStreamRenderer(req, ctx)
