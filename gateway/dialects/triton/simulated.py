"""The three servers behind Triton's generate extension, as a simulator imitates them.

The gateway's own Triton inbound is lenient: it takes every family's parameter names and answers
with the plain generate shape. A simulated server reads a request, and answers, the way the
server of its flavour does (each flavour, gateway.dialects.triton.flavors, holds its imitation):

- trtllm: `max_tokens` is a required input; stop words stay in the output; the prompt is echoed in
  a whole answer unless `exclude_input_in_output`; `sampling_parameters` means nothing; answers
  carry the ensemble's sequence fields and `output_log_probs`.
- vllm: `sampling_parameters`, when given, replaces the request parameters; max_tokens defaults
  to vLLM's 16; asking for the prompt back on a stream is an error; the prompt is echoed in a
  whole answer unless `exclude_input_in_output`.
- mindie: its own TGI-like names only (`max_new_tokens`; no stop words, no `max_tokens`); answers
  carry its `details`, `model_version: null`, and `data:` framing without a space.
"""

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from gateway import __version__, jsonutil
from gateway.codec.contract import Caller, Endpoint, GroupView, Inbound, Mount, PathValues, RenderContext, Reply
from gateway.dialects.triton import inbound as triton
from gateway.dialects.triton import render
from gateway.dialects.triton.schema import (
    GenerateParameters,
    SamplingMode,
    flag,
    merged_parameters,
    model_config,
    model_metadata,
)
from gateway.neutral.errors import GatewayError, InvalidRequest, NotFound
from gateway.neutral.events import TextDelta
from gateway.neutral.params import Params
from gateway.neutral.types import Answer, Choice, Finish, Request, Result, Usage
from gateway.records import record

# MindIE's rule for a request id (it refuses any other).
MINDIE_ID = re.compile(r"^[a-zA-Z0-9_-]{1,256}$")
# MindIE's finish words, written the way its TGI-like details hold them.
_MINDIE_FINISH: dict[Finish, str] = {
    Finish.EOS: "eos_token",
    Finish.STOP_STRING: "stop_sequence",
    Finish.STOP_TOKEN: "stop_sequence",
    Finish.LENGTH: "length",
    Finish.TOOL_CALLS: "eos_token",
    Finish.CONTENT_FILTER: "eos_token",
    Finish.ABORT: "stop_sequence",
    Finish.ERROR: "stop_sequence",
    Finish.UNKNOWN: "eos_token",
}
VLLM_DEFAULT_MAX_TOKENS = 16
# Names of NVIDIA's ensembles and of the vLLM backend that MindIE's variant does not read.
_NOT_MINDIE = ("max_tokens", "stop_words", "stop", "bad_words", "exclude_input_in_output", "stop_token_ids")


def _read_trtllm(data: dict[str, Any], merged: dict[str, Any], stream: bool) -> dict[str, Any]:
    merged.pop("max_new_tokens", None)
    merged.pop("stop", None)
    if "max_tokens" not in merged:
        raise InvalidRequest("missing required input 'max_tokens'", param="max_tokens", code="invalid_value")
    return merged


def _read_vllm(data: dict[str, Any], merged: dict[str, Any], stream: bool) -> dict[str, Any]:
    if stream and merged.get("exclude_input_in_output") is False:
        raise InvalidRequest(
            "streaming cannot return the prompt: exclude_input_in_output must not be false",
            param="exclude_input_in_output",
            code="invalid_value",
        )
    merged.setdefault("max_tokens", VLLM_DEFAULT_MAX_TOKENS)
    return merged


def _read_mindie(data: dict[str, Any], merged: dict[str, Any], stream: bool) -> dict[str, Any]:
    rid = data.get("id")
    if isinstance(rid, str) and not MINDIE_ID.match(rid):
        raise InvalidRequest("id must match ^[a-zA-Z0-9_-]{1,256}$", param="id", code="invalid_value")
    for name in _NOT_MINDIE:
        merged.pop(name, None)
    return merged


def _adjust_trtllm(m: GenerateParameters, p: Params) -> Params:
    p = p.replace(include_stop_str_in_output=True)  # TRT-LLM stops after the stop word
    if m.return_log_probs:
        p = p.replace(logprobs=True)  # the fake model's log probabilities fill output_log_probs
    return p


def _as_asked(m: GenerateParameters, p: Params) -> Params:
    return p


def _tensor(values: list[float]) -> float | list[float]:
    """Triton unwraps an output tensor of exactly one element to a scalar."""
    return values[0] if len(values) == 1 else values


def _log_probs(entries: Any, n: int) -> list[float]:
    if isinstance(entries, list) and entries:
        return [float(e.get("logprob", 0.0)) for e in entries if isinstance(e, dict)]
    return [0.0] * n  # TRT-LLM fills the tensor with zeros when log probs were not asked for


def _trtllm_answer(out: dict[str, Any], choice: TextDelta | Choice | None, generated: int | None) -> None:
    lps = _log_probs(choice.logprobs if choice is not None else None, generated or 0)
    out.update(sequence_end=False, sequence_id=0, sequence_start=False, cum_log_probs=round(sum(lps), 6))
    out.update(output_log_probs=_tensor(lps), context_logits=0.0, generation_logits=0.0)


def _trtllm_event(out: dict[str, Any], ev: TextDelta | Choice | None, tokens: int | None) -> None:
    count = tokens if tokens is not None else (1 if ev is not None else 0)
    lps = _log_probs(ev.logprobs if ev is not None else None, count)
    out.update(sequence_end=False, sequence_id=0, sequence_start=False, output_log_probs=_tensor(lps))


def _mindie_answer(
    out: dict[str, Any], generated: int | None, usage: Usage | None, finish: Finish | None, final: bool
) -> None:
    details: dict[str, Any] = {}
    if finish is not None:
        details["finish_reason"] = _MINDIE_FINISH[finish]
    details.update(generated_tokens=generated, first_token_cost=None, decode_cost=None)
    details.update(batch_size=[1, 1], queue_wait_time=[0, 0])
    out["details"] = details


def _ms(seconds: float) -> int:
    return max(int(seconds * 1000.0), 0)


class _MindIEEvents:
    """MindIE's per-event details: a running generated count, prefill and decode times."""

    def __init__(self, started: float) -> None:
        self._started = started
        self._generated = 0
        self._last = 0.0

    def trail(
        self, out: dict[str, Any], tokens: int | None, usage: Usage | None, finish: Finish | None, final: bool
    ) -> None:
        self._generated += tokens or 0
        details: dict[str, Any] = {}
        if final and finish is not None:
            details["finish_reason"] = _MINDIE_FINISH[finish]  # only the last event has one
        gen = usage.completion_tokens if usage is not None and usage.completion_tokens is not None else self._generated
        details.update(generated_tokens=gen, batch_size=1, queue_wait_time=0)
        out["details"] = details
        now = time.perf_counter()
        first = not self._last
        out["prefill_time"] = _ms(now - self._started) if first and self._started else (0 if first else None)
        out["decode_time"] = None if first else _ms(now - self._last)
        self._last = now


def _echo(s: render.Shape, req: Request, whole: bool) -> None:
    """A whole answer starts with the prompt unless the client asked to leave it out."""
    if whole and not flag(req.raw or {}, "exclude_input_in_output"):
        s.echo = req.prompt if isinstance(req.prompt, str) else ""


def _shape_trtllm(s: render.Shape, req: Request, ctx: RenderContext, whole: bool) -> None:
    _echo(s, req, whole)
    s.finish = s.n_in = s.n_out = s.hold = False
    s.lead = _trtllm_answer if whole else _trtllm_event


def _shape_vllm(s: render.Shape, req: Request, ctx: RenderContext, whole: bool) -> None:
    _echo(s, req, whole)


def _shape_mindie(s: render.Shape, req: Request, ctx: RenderContext, whole: bool) -> None:
    if "id" not in s.head:
        s.head = {"id": ctx.request_id, **s.head}  # MindIE answers with its own id when given none
    s.head["model_version"] = None
    s.frame = b"data:"
    s.finish = s.n_in = s.n_out = False
    if flag(req.raw or {}, "details"):
        s.hold = True
        s.trail = _mindie_answer if whole else _MindIEEvents(ctx.started).trail
    else:
        s.hold = False


@record
class Imitation:
    """How the server of one flavour reads a generate request and writes its answer."""

    # What `sampling_parameters` does on it (see schema.merged_parameters).
    sampling: SamplingMode
    # The merged parameters as it sees them (it may refuse some, or fill in its defaults).
    read: Callable[[dict[str, Any], dict[str, Any], bool], dict[str, Any]]
    # The neutral parameters the fake model needs to answer as it would.
    adjust: Callable[[GenerateParameters, Params], Params]
    # Its answer's shape, from the plain generate one.
    shape: Callable[[render.Shape, Request, RenderContext, bool], None]

    def answer_shape(self, req: Request, ctx: RenderContext, whole: bool) -> render.Shape:
        s = render.shape(req, ctx)
        self.shape(s, req, ctx, whole)
        return s


TRTLLM = Imitation("ignore", _read_trtllm, _adjust_trtllm, _shape_trtllm)
VLLM = Imitation("only", _read_vllm, _as_asked, _shape_vllm)
MINDIE = Imitation("ignore", _read_mindie, _as_asked, _shape_mindie)


def _parse(server: Imitation, stream: bool) -> Any:
    def parse(body: bytes, path: Any) -> Request:
        data = triton.body_of(body)
        merged = server.read(data, merged_parameters(data, server.sampling), stream)
        req, m = triton.read_generate(data, path, stream, merged, echo=False)
        return req.but(params=server.adjust(m, req.params))

    return parse


def _render(server: Imitation) -> Any:
    def render_result(result: Answer, req: Request, ctx: RenderContext) -> bytes:
        assert isinstance(result, Result)
        return render.answer(server.answer_shape(req, ctx, whole=True), result)

    return render_result


def _stream(server: Imitation) -> Any:
    def make(req: Request, ctx: RenderContext) -> render.TritonStreamRenderer:
        return render.TritonStreamRenderer(req, ctx, server.answer_shape(req, ctx, whole=False))

    return make


# The simulated server describes itself: there is no server behind it to ask.


async def _server(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    return Reply(body=jsonutil.dumps({"name": "triton", "version": __version__, "extensions": []}))


async def _metadata(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    group.select(path["model"])
    return Reply(body=jsonutil.dumps(model_metadata(path["model"])))


async def _config(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    group.select(path["model"])
    return Reply(body=jsonutil.dumps(model_config(path["model"])))


async def _model_ready(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    try:
        group.select(path["model"])
    except NotFound:
        return Reply(400, jsonutil.dumps({"error": "Model version not ready"}))
    return Reply(200)


_INFO: dict[Any, Any] = {
    triton.server_info: _server,
    triton.metadata: _metadata,
    triton.config: _config,
    triton.model_ready: _model_ready,
}


class SimulatedTriton:
    """Triton's inbound with its generate paths read and answered as one server family does."""

    def __init__(self, server: Imitation) -> None:
        generate = Endpoint(_parse(server, False), _render(server), None, triton.path_model)
        stream = Endpoint(_parse(server, True), _render(server), _stream(server), triton.path_model)
        swap = {triton.GENERATE: generate, triton.GENERATE_STREAM: stream}
        self.mounts: Sequence[Mount] = [
            Mount(
                m.method,
                m.path,
                swap.get(m.endpoint, m.endpoint) if m.endpoint else None,
                _INFO.get(m.info, m.info),
                m.auth,
            )
            for m in triton.TritonInbound.mounts
        ]
        self._inbound: Inbound = triton.TritonInbound()

    def error_reply(self, err: GatewayError) -> Reply:
        return self._inbound.error_reply(err)
