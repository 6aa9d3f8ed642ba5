"""TGI answers as clients expect them: whole answers and `/generate_stream` events.

A `Flavour` holds the few ways MindIE's copy of the wire (its TGI-style and native routes)
differs from Hugging Face's: framing space, `index`, prompt separator, extra detail keys. See
docs/dialects/tgi.md.
"""

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from gateway import jsonutil
from gateway.codec.contract import RenderContext
from gateway.codec.frames import filled_texts, template_pieces
from gateway.neutral.errors import GatewayError
from gateway.neutral.events import Event, FinishEvent, TextDelta, TextRun, UsageEvent
from gateway.neutral.types import Answer, Choice, Finish, Request, Result, Usage
from gateway.records import record

# The finish words TGI's clients know, for each canonical reason.
FINISH: dict[Finish, str] = {
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

_dumps = jsonutil.dumps
_TEXTS = (TextDelta, TextRun)


def raw_params(req: Request) -> dict[str, Any]:
    p = (req.raw or {}).get("parameters")
    return p if isinstance(p, dict) else {}


def wants_details(req: Request) -> bool:
    return bool(raw_params(req).get("details"))


def ids_value(ids: list[int] | None, unknown: int | None, lists: bool = True) -> int | list[int] | None:
    """One id as a number, several as a list (or the first, where lists are not allowed), none
    as the flavour's unknown."""
    if not ids:
        return unknown
    return ids[0] if len(ids) == 1 or not lists else ids


@record
class Flavour:
    name: str
    space: bool  # "data: " (MindIE) or "data:" (TGI)
    index: bool  # stream events carry a running "index" (TGI)
    prompt_sep: str  # between prompt and output when return_full_text is set
    prompt_tokens: bool  # details carry "prompt_tokens" (MindIE)
    input_length: bool  # stream details carry "input_length" (TGI)
    mindie_token_keys: bool  # details.tokens keys in MindIE's order (id, logprob, special, text)
    unknown_id: int | None  # what token.id says when the backend gave none
    error_frame: Callable[[GatewayError], bytes]
    # token.id may be a list when one piece of text holds several ids (MindIE); TGI clients
    # parse it as one integer, so there the first id stands for the piece.
    id_lists: bool = True


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
    details["finish_reason"] = FINISH[c.finish or Finish.EOS]
    details["generated_tokens"] = _generated_tokens(u, c.token_ids, 0 if not text else 1)
    details["seed"] = req.params.seed
    details["prefill"] = []
    details["tokens"] = detail_tokens(fl, c)
    out["details"] = details
    return out


def detail_tokens(fl: Flavour, c: Choice) -> list[dict[str, Any]]:
    """`details.tokens`: one entry per generated token, with its id, its text and logprob from
    the backend's logprobs where it sent them, else its text as the tokenizer reads the id."""
    ids: list[int] = c.token_ids or []
    entries = c.logprobs if isinstance(c.logprobs, list) and c.logprobs else None
    if entries is not None and ids and len(entries) != len(ids):
        entries = None
    texts = c.tokens if c.tokens is not None and len(c.tokens) == len(ids) else None
    out = []
    for k in range(len(ids) or (len(entries) if entries else 0)):
        entry = entries[k] if entries is not None and isinstance(entries[k], dict) else {}
        token_id = ids[k] if ids else fl.unknown_id
        text = entry.get("token", texts[k] if texts else "")
        logprob = entry.get("logprob")
        if fl.mindie_token_keys:
            out.append({"id": token_id, "logprob": logprob, "special": False, "text": text})
        else:
            out.append({"id": token_id, "text": text, "logprob": logprob, "special": False})
    return out


def render_result(fl: Flavour, array: bool) -> Callable[[Answer, Request, RenderContext], bytes]:
    def render(result: Answer, req: Request, ctx: RenderContext) -> bytes:
        assert isinstance(result, Result)
        obj = render_object(fl, result, req)
        return _dumps([obj] if array else obj)

    return render


class HoldBackRenderer(ABC):
    """Stream renderer base. TGI and MindIE send the last token inside the final event, and one
    event per generated token. A backend that says it is finished with its last token (RenderContext
    .finish_in_band) has every other token sent the moment it arrives; with any other backend a
    token cannot be known to be the last until something follows it, so each waits for the next
    event. A text delta is one event: where a backend says which tokens it generated, its parser
    made a delta per token (text "" for one that ends inside a character, as TGI sends it).
    Subclasses shape the events."""

    content_type = "text/event-stream"
    # Whether token events say when their token came (MindIE's timings): only then is the clock
    # read, once per read.
    timed = False

    def __init__(self, fl: Flavour, req: Request, ctx: RenderContext) -> None:
        self._fl = fl
        self._prefix = b"data: " if fl.space else b"data:"
        self._req = req
        self._pending: TextDelta | None = None
        self._texts: list[str] = []  # every token's text, for the final event (and the count)
        self._n_ids = 0
        self._finish: Finish | None = None
        self._usage: Usage | None = None
        self._failed = False
        self._details = wants_details(req)
        self._t0 = ctx.started or time.perf_counter()
        self._t_last = 0.0
        # When the held-back token arrived: ms since the previous one (or since the start).
        self._pending_ms = 0.0
        self._in_band = ctx.finish_in_band

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        # The token that rides in the final event: the last one before a finish in this batch
        # (a backend that does not finish in-band has every token held anyway).
        ride = -1
        if self._in_band and len(events) > 1:  # (a lone event has no finish after it)
            last_text = -1
            for i, ev in enumerate(events):
                if isinstance(ev, _TEXTS):
                    if ev.index == 0:
                        last_text = i
                elif isinstance(ev, FinishEvent) and ev.index == 0:
                    ride = last_text
        out: list[bytes] = []
        in_band, texts, frame = self._in_band, self._texts, self.token_frame
        pending, pending_ms = self._pending, self._pending_ms
        # Tokens that come in one read came at once: the first waited since the one before,
        # the others not at all.
        clock = self.timed
        for i, ev in enumerate(events):
            t = type(ev)
            if t is TextDelta or t is TextRun:
                assert isinstance(ev, _TEXTS)
                if ev.index != 0:
                    continue
                ms = 0.0
                if clock:
                    ms, clock = self.elapsed_ms(), False
                if not in_band and pending is not None:
                    out.append(frame(pending, pending_ms))  # a token followed it: not the last
                # A run's tokens but its last are written at once (they are followed); its last
                # came with them, 0 ms later, and is treated as a lone delta would be.
                if isinstance(ev, TextRun):
                    texts += ev.texts
                    ids = ev.ids
                    if ids is not None:
                        self._n_ids += len(ids)
                    out.append(self.token_frames(ev.texts[:-1], ms, None if ids is None else ids[:-1]))
                    last, ms = TextDelta(ev.texts[-1], 0, None, None if ids is None else ids[-1:]), 0.0
                else:
                    texts.append(ev.text)
                    if ev.token_ids:
                        self._n_ids += len(ev.token_ids)
                    last = ev
                if not in_band or i == ride:
                    pending, pending_ms = last, ms
                else:
                    out.append(frame(last, ms))
            elif t is FinishEvent:
                assert isinstance(ev, FinishEvent)
                if ev.index == 0:
                    self._finish = ev.reason
            elif t is UsageEvent:
                assert isinstance(ev, UsageEvent)
                self._usage = ev.usage
        self._pending, self._pending_ms = pending, pending_ms
        return b"".join(out)

    def elapsed_ms(self) -> float:
        """Milliseconds since the previous token (or since the stream began, for the first);
        whoever writes it rounds it."""
        now = time.perf_counter()
        base = self._t_last or self._t0
        self._t_last = now
        return (now - base) * 1000

    @abstractmethod
    def token_frame(self, d: TextDelta, ms: float) -> bytes:
        """One token's event, framed (`data:`, its JSON, a blank line); `ms` is how long after
        the previous token (or the start) it came. Written as one byte template: this runs once
        per streamed token."""

    @abstractmethod
    def token_frames(self, texts: list[str], ms: float, ids: list[int] | None) -> bytes:
        """The events of tokens that came together (a run of a fast stream's tokens, with each
        one's id where the backend gave them), the first `ms` after the one before, the others
        at once: what `token_frame` writes for each, in one call over the texts."""

    @abstractmethod
    def final_event(
        self, last: TextDelta | None, ms: float, text: str, details: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The closing event: the last token (if any), the whole text and the details."""

    def details(self) -> dict[str, Any]:
        u = self._usage
        d: dict[str, Any] = {}
        if self._fl.prompt_tokens:
            d["prompt_tokens"] = u.prompt_tokens if u else None
        d["finish_reason"] = FINISH[self._finish or Finish.EOS]
        d["generated_tokens"] = (
            u.completion_tokens if u and u.completion_tokens is not None else (self._n_ids or len(self._texts))
        )
        d["seed"] = self._req.params.seed
        if self._fl.input_length and u is not None and u.prompt_tokens is not None:
            d["input_length"] = u.prompt_tokens
        return d

    def error(self, err: GatewayError) -> bytes:
        self._failed = True
        out = b""
        if self._pending is not None:
            # The held-back token came from the backend before the fault: the client gets it first.
            out = self.token_frame(self._pending, self._pending_ms)
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
        ms = self._pending_ms if self._pending is not None else self.elapsed_ms()
        event = self.final_event(self._pending, ms, text, details)
        return self._prefix + _dumps(event) + b"\n\n"


_TOKEN_FIELDS = b'"token":{"id":%b,"text":%b,"logprob":null,"special":false},"generated_text":null,"details":null}\n\n'
_TOKEN = b"{" + _TOKEN_FIELDS
_INDEXED_TOKEN = b'{"index":%d,' + _TOKEN_FIELDS


class TGIStreamRenderer(HoldBackRenderer):
    """`/generate_stream` events: token, generated_text (final only), details (final only)."""

    def __init__(self, fl: Flavour, req: Request, ctx: RenderContext) -> None:
        super().__init__(fl, req, ctx)
        self._index = 0
        self._no_id = _dumps(fl.unknown_id)  # a token the backend gave no id for
        self._frame = self._prefix + (_INDEXED_TOKEN if fl.index else _TOKEN)
        holes = 3 if fl.index else 2
        self._pieces = template_pieces(self._frame, holes)
        if not fl.index:
            # A token without an id, cut around its text (a run's frames differ only there).
            self._text_pre, self._text_post = (self._frame % (self._no_id, b"\0")).split(b"\0")
            self._between = self._text_post + self._text_pre

    def _token(self, d: TextDelta | None) -> dict[str, Any]:
        if d is None:
            return {"id": self._fl.unknown_id, "text": "", "logprob": None, "special": False}
        return {
            "id": ids_value(d.token_ids, self._fl.unknown_id, self._fl.id_lists),
            "text": d.text,
            "logprob": None,
            "special": False,
        }

    def _event(self, d: TextDelta | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self._fl.index:
            self._index += 1
            out["index"] = self._index
        out["token"] = self._token(d)
        return out

    def token_frame(self, d: TextDelta, ms: float) -> bytes:
        # The fields of _event's token and the final event's nulls, in their order.
        ids = d.token_ids
        token_id = self._no_id if not ids else _dumps(ids_value(ids, self._fl.unknown_id, self._fl.id_lists))
        if self._fl.index:
            self._index += 1
            return self._frame % (self._index, token_id, _dumps(d.text))
        return self._frame % (token_id, _dumps(d.text))

    def token_frames(self, texts: list[str], ms: float, ids: list[int] | None) -> bytes:
        # token_frame of each (no time in TGI's): the frames laid out from the template's pieces
        # and joined once (gateway.codec.frames), or where only the text differs, the texts
        # encoded together.
        if not texts:
            return b""
        if ids is None and not self._fl.index:
            return self._text_pre + jsonutil.strings_joined(texts, self._between) + self._text_post
        named = [self._no_id] * len(texts) if ids is None else jsonutil.numbers(ids)
        if not self._fl.index:
            return filled_texts(self._pieces, [named], texts)
        first, self._index = self._index + 1, self._index + len(texts)
        return filled_texts(self._pieces, [jsonutil.counted(first, self._index + 1), named], texts)

    def final_event(
        self, last: TextDelta | None, ms: float, text: str, details: dict[str, Any] | None
    ) -> dict[str, Any]:
        return self._event(last) | {"generated_text": text, "details": details}


def stream_renderer(fl: Flavour) -> Callable[[Request, RenderContext], TGIStreamRenderer]:
    def make(req: Request, ctx: RenderContext) -> TGIStreamRenderer:
        return TGIStreamRenderer(fl, req, ctx)

    return make
