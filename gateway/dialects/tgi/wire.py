"""The TGI wire, shared by the `tgi` dialect and MindIE's TGI-style routes.

A `Flavour` holds the few ways MindIE's copy of the wire differs from Hugging Face's (framing
space, `index`, prompt separator, extra detail keys); everything else (request mapping, whole
answers, the stream renderer with its one-token hold-back, and the stream parser) lives here once.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from gateway import jsonutil
from gateway.core.errors import GatewayError, Unsupported, UpstreamClass, UpstreamError
from gateway.core.finish import TGI as TGI_FINISH
from gateway.core.finish import parse_finish
from gateway.core.types import (
    Choice,
    EmbeddingResult,
    Event,
    Finish,
    FinishEvent,
    Request,
    Result,
    Task,
    TextDelta,
    Usage,
    UsageEvent,
)
from gateway.core.validation import validate
from gateway.dialects.base import RenderContext
from gateway.sse import SSEDecoder

_dumps = jsonutil.dumps

# TGI/MindIE parameter -> neutral name (identity unless renamed).
_PARAM_NAMES = {
    "max_new_tokens": "max_tokens",
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "typical_p": "typical_p",
    "do_sample": "do_sample",
    "seed": "seed",
    "repetition_penalty": "repetition_penalty",
    "frequency_penalty": "frequency_penalty",
    "watermark": "watermark",
    "truncate": "truncate",
    "priority": "priority",
    "timeout": "timeout",
}


def neutral_params(p: BaseModel | None) -> dict[str, Any]:
    """Neutral params from a validated TGI/MindIE `parameters` object (unset and null left out)."""
    out: dict[str, Any] = {}
    if p is None:
        return out
    # The validated fields, read as a dict: getattr on a pydantic model for a field this
    # dialect's model lacks takes pydantic's slow exception path, once per name per request.
    values = p.__dict__
    for wire, name in _PARAM_NAMES.items():
        v = values.get(wire)
        if v is not None:
            out[name] = v
    stop = values.get("stop")
    if stop:
        out["stop"] = [stop] if isinstance(stop, str) else list(stop)
    best_of = values.get("best_of")
    if best_of is not None and best_of > 1:
        out["best_of"] = best_of
    if values.get("top_n_tokens"):
        raise Unsupported("parameters.top_n_tokens is not supported by the gateway", param="parameters.top_n_tokens")
    if values.get("grammar") is not None:
        raise Unsupported("parameters.grammar is not supported by the gateway", param="parameters.grammar")
    return out


def parse_generate(data: dict[str, Any], model: type[BaseModel], inbound: str, stream: bool) -> Request:
    """A TGI-shaped body (`inputs` + `parameters`) to a neutral text completion request."""
    m = validate(model, data)
    params = neutral_params(getattr(m, "parameters", None))
    prompt: str = getattr(m, "inputs")  # noqa: B009 - the field lives on every TGI-shaped model
    return Request(
        task=Task.COMPLETION,
        inbound=inbound,
        prompt=prompt,
        stream=stream,
        params=params,
        raw=data,
        wants_token_ids=True,
    )


def raw_params(req: Request) -> dict[str, Any]:
    p = (req.raw or {}).get("parameters")
    return p if isinstance(p, dict) else {}


def wants_details(req: Request) -> bool:
    return bool(raw_params(req).get("details"))


def ids_value(ids: list[int] | None, unknown: int | None) -> int | list[int] | None:
    """One id as a number, several (multi-token steps) as a list, none as the flavour's unknown."""
    if not ids:
        return unknown
    return ids[0] if len(ids) == 1 else ids


def ids_list(value: Any) -> list[int] | None:
    """`token.id` as MindIE or TGI sends it: a number, a list of numbers, or null."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return value or None
    return None


@dataclass(frozen=True, slots=True)
class Flavour:
    name: str
    space: bool  # "data: " (MindIE) or "data:" (TGI)
    index: bool  # stream events carry a running "index" (TGI)
    prompt_sep: str  # between prompt and output when return_full_text is set
    prompt_tokens: bool  # details carry "prompt_tokens" (MindIE)
    input_length: bool  # stream details carry "input_length" (TGI)
    detail_tokens_null: bool  # details.tokens are ids with null text/logprob/special (MindIE)
    unknown_id: int | None  # what token.id says when the backend gave none
    error_frame: Callable[[GatewayError], bytes]


def _generated_tokens(usage: Usage | None, ids: list[int] | None, fallback: int) -> int:
    if usage is not None and usage.completion_tokens is not None:
        return usage.completion_tokens
    return len(ids) if ids else fallback


def render_object(fl: Flavour, result: Result, req: Request) -> dict[str, Any]:
    """One whole answer in TGI form (`generated_text` and, if asked, `details`)."""
    c = result.choices[0] if result.choices else Choice()
    rp = raw_params(req)
    text = c.text
    if rp.get("return_full_text") and isinstance(req.prompt, str):
        text = req.prompt + fl.prompt_sep + text
    out: dict[str, Any] = {"generated_text": text}
    if not rp.get("details") and not rp.get("decoder_input_details"):
        return out
    u = result.usage
    details: dict[str, Any] = {}
    if fl.prompt_tokens:
        details["prompt_tokens"] = u.prompt_tokens if u else None
    details["finish_reason"] = TGI_FINISH[c.finish or Finish.EOS]
    details["generated_tokens"] = _generated_tokens(u, c.token_ids, 0 if not text else 1)
    details["seed"] = req.params.get("seed")
    details["prefill"] = []
    if fl.detail_tokens_null:
        details["tokens"] = [{"id": i, "logprob": None, "special": None, "text": None} for i in c.token_ids or ()]
    else:
        details["tokens"] = []
    out["details"] = details
    return out


def render_result(fl: Flavour, array: bool) -> Callable[[Result | EmbeddingResult, Request, RenderContext], bytes]:
    def render(result: Result | EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
        assert isinstance(result, Result)
        obj = render_object(fl, result, req)
        return _dumps([obj] if array else obj)

    return render


class HoldBackRenderer:
    """Stream renderer base: each token goes out when the next arrives, so the last one can ride
    in the final event, as TGI and MindIE both send it. Subclasses shape the two event kinds."""

    content_type = "text/event-stream"

    def __init__(self, fl: Flavour, req: Request, ctx: RenderContext) -> None:
        self._fl = fl
        self._prefix = b"data: " if fl.space else b"data:"
        self._req = req
        self._pending: TextDelta | None = None
        self._texts: list[str] = []
        self._n_ids = 0
        self._n_deltas = 0
        self._finish: Finish | None = None
        self._usage: Usage | None = None
        self._failed = False
        self._details = wants_details(req)
        self._t0 = time.perf_counter()
        self._t_last = 0.0
        # When the held-back token arrived: ms since the previous one (or since the start).
        self._pending_ms = 0.0

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        out = b""
        for ev in events:
            t = type(ev)
            if t is TextDelta:
                assert isinstance(ev, TextDelta)
                if ev.index != 0:
                    continue
                if self._pending is not None:
                    out += self._prefix + _dumps(self.token_event(self._pending, self._pending_ms)) + b"\n\n"
                self._pending = ev
                self._pending_ms = self.elapsed_ms()
                self._texts.append(ev.text)
                self._n_deltas += 1
                self._n_ids += len(ev.token_ids or ())
            elif t is FinishEvent:
                assert isinstance(ev, FinishEvent)
                if ev.index == 0:
                    self._finish = ev.reason
            elif t is UsageEvent:
                assert isinstance(ev, UsageEvent)
                self._usage = ev.usage
        return out

    def elapsed_ms(self) -> float:
        """Milliseconds since the previous token (or since the stream began, for the first)."""
        now = time.perf_counter()
        base = self._t_last or self._t0
        self._t_last = now
        return round((now - base) * 1000, 2)

    def token_event(self, d: TextDelta, ms: float) -> dict[str, Any]:
        """One token's event; `ms` is how long after the previous token (or the start) it came."""
        raise NotImplementedError

    def final_event(
        self, last: TextDelta | None, ms: float, text: str, details: dict[str, Any] | None
    ) -> dict[str, Any]:
        raise NotImplementedError

    def details(self) -> dict[str, Any]:
        u = self._usage
        d: dict[str, Any] = {}
        if self._fl.prompt_tokens:
            d["prompt_tokens"] = u.prompt_tokens if u else None
        d["finish_reason"] = TGI_FINISH[self._finish or Finish.EOS]
        d["generated_tokens"] = (
            u.completion_tokens if u and u.completion_tokens is not None else (self._n_ids or self._n_deltas)
        )
        d["seed"] = self._req.params.get("seed")
        if self._fl.input_length and u is not None and u.prompt_tokens is not None:
            d["input_length"] = u.prompt_tokens
        return d

    def error(self, err: GatewayError) -> bytes:
        self._failed = True
        out = b""
        if self._pending is not None:
            # The held-back token came from the backend before the fault: the client gets it first.
            out = self._prefix + _dumps(self.token_event(self._pending, self._pending_ms)) + b"\n\n"
            self._pending = None
        return out + self._fl.error_frame(err)

    def end(self) -> bytes:
        if self._failed:
            return b""
        text = "".join(self._texts)
        rp = raw_params(self._req)
        if rp.get("return_full_text") and isinstance(self._req.prompt, str):
            text = self._req.prompt + self._fl.prompt_sep + text
        details = self.details() if self._details else None
        event = self.final_event(self._pending, self._pending_ms, text, details)
        return self._prefix + _dumps(event) + b"\n\n"


class TGIStreamRenderer(HoldBackRenderer):
    """`/generate_stream` events: token, generated_text (final only), details (final only)."""

    def __init__(self, fl: Flavour, req: Request, ctx: RenderContext) -> None:
        super().__init__(fl, req, ctx)
        self._index = 0

    def _token(self, d: TextDelta | None) -> dict[str, Any]:
        if d is None:
            return {"id": self._fl.unknown_id, "text": "", "logprob": None, "special": False}
        return {"id": ids_value(d.token_ids, self._fl.unknown_id), "text": d.text, "logprob": None, "special": False}

    def _event(self, d: TextDelta | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self._fl.index:
            self._index += 1
            out["index"] = self._index
        out["token"] = self._token(d)
        return out

    def token_event(self, d: TextDelta, ms: float) -> dict[str, Any]:
        return self._event(d) | {"generated_text": None, "details": None}

    def final_event(
        self, last: TextDelta | None, ms: float, text: str, details: dict[str, Any] | None
    ) -> dict[str, Any]:
        return self._event(last) | {"generated_text": text, "details": details}


def stream_renderer(fl: Flavour) -> Callable[[Request, RenderContext], TGIStreamRenderer]:
    def make(req: Request, ctx: RenderContext) -> TGIStreamRenderer:
        return TGIStreamRenderer(fl, req, ctx)

    return make


# ---- outbound: parsing what a TGI-style server sends -----------------------------------------


def _midstream(text: str) -> UpstreamError:
    return UpstreamError(f"backend broke off the stream: {text}", upstream_class=UpstreamClass.MIDSTREAM)


def error_text(obj: Any) -> str:
    """The message of a `{"error", "error_type"}` body; MindIE sometimes JSON-encodes it twice."""
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("Error"))
        if isinstance(err, str):
            if err.startswith("{"):
                try:
                    return error_text(jsonutil.loads(err))
                except jsonutil.JSONDecodeError:
                    pass
            return err
        if err is not None:
            return str(err)
    return str(obj)[:500]


def error_message(status: int, body: bytes) -> str:
    try:
        return error_text(jsonutil.loads(body))
    except jsonutil.JSONDecodeError:
        return body.decode("utf-8", "replace").strip()[:500] or "(empty body)"


def parse_object(obj: Any, prompt_tokens: int | None = None) -> Result:
    """A whole TGI/MindIE answer (object, or the one-element array of `POST /`) to a Result."""
    if isinstance(obj, list):
        obj = obj[0]
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    if "error" in obj and "generated_text" not in obj:
        raise UpstreamError(f"backend error: {error_text(obj)}", upstream_class=UpstreamClass.PROTOCOL)
    text = obj["generated_text"]
    if not isinstance(text, str):
        raise ValueError("generated_text is not a string")
    details = obj.get("details") or {}
    ids = details.get("generated_token_ids")
    if not isinstance(ids, list):
        toks = details.get("tokens")
        ids = [i for t in toks for i in ids_list(t.get("id")) or ()] if isinstance(toks, list) and toks else None
    finish = parse_finish(details.get("finish_reason")) if details else None
    completion = details.get("generated_tokens")
    prompt = details.get("prompt_tokens", details.get("input_length", prompt_tokens))
    usage = Usage(prompt, completion) if completion is not None or prompt is not None else None
    return Result([Choice(0, text, finish=finish or Finish.EOS, token_ids=ids or None)], usage)


class GenerateStreamParser:
    """TGI `/generate_stream`, MindIE TGI-style and native streams, to neutral events.

    Accepts `data:` with or without a space, keep-alive comments, `token.id` as a number or a
    list, a final event whose token text is null (MindIE native: the last piece is recovered
    from `generated_text`), in-band `{"error"}` events, and raw text lines (MindIE's mid-stream
    failure), which become an UpstreamError; a stream without its final event is truncated.
    """

    __slots__ = ("_decoder", "_error", "_final", "_prompt_tokens", "_sent")

    def __init__(self, prompt_tokens: int | None = None) -> None:
        self._error: Exception | None = None
        self._decoder = SSEDecoder()
        self._final = False
        self._sent: list[str] = []
        self._prompt_tokens = prompt_tokens

    def feed(self, data: bytes) -> list[Event]:
        if self._error is not None:
            raise self._error
        out: list[Event] = []
        try:
            for ev in self._decoder.feed(data):
                self._event(ev.data, out)
            self._check_stray()
        except (UpstreamError, ValueError, KeyError, TypeError, AttributeError) as e:
            # Tokens that arrived in the same read as the fault still reach the client first.
            if not out:
                raise
            self._error = e
        return out

    def close(self) -> list[Event]:
        if self._error is not None:
            raise self._error
        out: list[Event] = []
        for ev in self._decoder.feed(b"\n\n") + self._decoder.close():
            self._event(ev.data, out)
        self._check_stray()
        if not self._final:
            raise UpstreamError("backend stream ended before its final event", upstream_class=UpstreamClass.MIDSTREAM)
        return out

    def _check_stray(self) -> None:
        if self._decoder.stray:
            raise _midstream(b" ".join(self._decoder.stray).decode("utf-8", "replace")[:500])

    def _event(self, data: bytes, out: list[Event]) -> None:
        if self._final:
            return
        try:
            obj = jsonutil.loads(data)
        except jsonutil.JSONDecodeError:
            raise _midstream(data.decode("utf-8", "replace")[:500]) from None
        if not isinstance(obj, dict):
            raise _midstream(data.decode("utf-8", "replace")[:500])
        if "error" in obj:
            raise UpstreamError(f"backend error mid-stream: {error_text(obj)}", upstream_class=UpstreamClass.MIDSTREAM)
        tok = obj.get("token") or {}
        ids = ids_list(tok.get("id"))
        text = tok.get("text")
        if isinstance(text, str) and text and not tok.get("special"):
            out.append(TextDelta(text, 0, None, ids))
            self._sent.append(text)
            ids = None
        gen = obj.get("generated_text")
        if gen is None:
            return
        self._final = True
        sent = "".join(self._sent)
        if isinstance(gen, str) and len(gen) > len(sent) and gen.startswith(sent):
            out.append(TextDelta(gen[len(sent) :], 0, None, ids))
        details = obj.get("details") or {}
        out.append(FinishEvent(parse_finish(details.get("finish_reason")) or Finish.EOS))
        prompt = details.get("prompt_tokens", details.get("input_length", self._prompt_tokens))
        completion = details.get("generated_tokens")
        if prompt is not None or completion is not None:
            out.append(UsageEvent(Usage(prompt, completion)))
