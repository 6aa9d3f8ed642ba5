"""Triton generate answers as clients expect them: one JSON object, or SSE `data: ` events.

The answer is `{id?, model_name, model_version, text_output}`; a stream is one event per text
delta, with no terminator: it ends when the connection closes. A client may ask for the vLLM
backend's outputs (`return_finish_reason`, `return_num_input_tokens`, `return_num_output_tokens`);
they are added when the gateway knows them, never guessed. As the vLLM backend does, a stream
then carries `finish_reason: "None"` until its last event, so the last text event is held back
until the stream ends. See docs/dialects/triton.md.

Answers are shaped by a `Shape` worked out once per request; `lead` and `trail` hooks let a
caller add fields of its own before and after the text (the simulator, imitating one server).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway import jsonutil
from gateway.codec.contract import RenderContext
from gateway.dialects.triton.schema import flag
from gateway.neutral.errors import GatewayError
from gateway.neutral.events import Event, FinishEvent, Frame, TextDelta, UsageEvent, expand
from gateway.neutral.types import Answer, Choice, Finish, Request, Result, Usage

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
# Fields added before the text (`text_output`) of one answer or event: (fields, the event's text
# delta or None, its token count or None). And after it: (fields, the delta's token count,
# usage on the last event or whole answer, whether this is the last).
Lead = Callable[[dict[str, Any], TextDelta | Choice | None, int | None], None]
Trail = Callable[[dict[str, Any], int | None, Usage | None, Finish | None, bool], None]


def _nothing(*args: Any) -> None:
    return None


@dataclass(slots=True)
class Shape:
    """What one request's answer holds besides its text; worked out once per request."""

    head: dict[str, Any]
    frame: bytes = b"data: "
    echo: str = ""  # prepended to a whole answer (servers that return the prompt by default)
    finish: bool = False
    n_in: bool = False
    n_out: bool = False
    # Fields only the last event can carry hold the last text event back.
    hold: bool = False
    lead: Lead = field(default=_nothing)
    trail: Trail = field(default=_nothing)

    @property
    def plain(self) -> bool:
        return not self.hold and self.lead is _nothing


def head(req: Request, ctx: RenderContext) -> dict[str, Any]:
    out: dict[str, Any] = {}
    raw_id = (req.raw or {}).get("id")
    if isinstance(raw_id, str):
        out["id"] = raw_id
    out["model_name"] = req.model or ctx.model
    out["model_version"] = req.path_params.get("version", DEFAULT_VERSION)
    return out


def shape(req: Request, ctx: RenderContext) -> Shape:
    raw = req.raw or {}
    s = Shape(head(req, ctx))
    s.finish = flag(raw, "return_finish_reason")
    s.n_in = flag(raw, "return_num_input_tokens")
    s.n_out = flag(raw, "return_num_output_tokens")
    s.hold = s.finish or s.n_in or s.n_out
    return s


def answer(s: Shape, result: Result) -> bytes:
    choice = result.choices[0] if result.choices else Choice()
    usage = result.usage or Usage()
    out = dict(s.head)
    generated = usage.completion_tokens
    if generated is None and choice.token_ids is not None:
        generated = len(choice.token_ids)
    s.lead(out, choice, generated)
    out["text_output"] = s.echo + choice.text
    if s.finish and choice.finish is not None:
        out["finish_reason"] = VLLM_FINISH[choice.finish]
    if s.n_in and usage.prompt_tokens is not None:
        out["num_input_tokens"] = usage.prompt_tokens
    if s.n_out and generated is not None:
        out["num_output_tokens"] = generated
    s.trail(out, generated, usage, choice.finish, True)
    return _dumps(out)


def render_result(result: Answer, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(result, Result)
    return answer(shape(req, ctx), result)


def error_event(err: GatewayError) -> bytes:
    return b"data: " + _dumps({"error": err.message}) + b"\n\n"


class TritonStreamRenderer:
    """Each text delta becomes `data: {id?, model_name, model_version, text_output, ...}`."""

    content_type = "text/event-stream; charset=utf-8"

    def __init__(self, req: Request, ctx: RenderContext, s: Shape | None = None) -> None:
        self._s = s = s or shape(req, ctx)
        self._plain = s.plain
        self._prefix = s.frame + _dumps(s.head)[:-1] + b',"text_output":'
        self._pending: TextDelta | None = None
        self._finish: Finish | None = None
        self._usage: Usage | None = None
        self._prompt_tokens: int | None = None
        self._reported = 0  # num_output_tokens sent so far
        self._sent = False
        self._failed = False

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        parts = []
        for ev in expand(events):
            t = type(ev)
            if t is TextDelta:
                assert isinstance(ev, TextDelta)
                if ev.index != 0 or not ev.text:
                    continue
                if self._plain:
                    parts.append(self._prefix + _dumps(ev.text) + b"}\n\n")
                elif self._s.hold:
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
        s.lead(out, ev, tokens)
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
        s.trail(out, tokens, usage, self._finish if final else None, final)
        return s.frame + _dumps(out) + b"\n\n"

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


class PassthroughStream:
    """A Triton backend's events for a client of Triton's wire, as they came (see reading)."""

    content_type = "text/event-stream; charset=utf-8"

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        return b"".join(ev.payload for ev in events if type(ev) is Frame)

    def error(self, err: GatewayError) -> bytes:
        return error_event(err)

    def end(self) -> bytes:
        return b""


def stream_renderer(req: Request, ctx: RenderContext) -> TritonStreamRenderer | PassthroughStream:
    return PassthroughStream() if ctx.passthrough else TritonStreamRenderer(req, ctx)
