"""MindIE answers as its clients expect them, route by route. See docs/dialects/mindie.md.

- native /infer, /infer_token: `generated_text` + `details`; streamed events carry
  `prefill_time` (first token) or `decode_time` (later ones) in milliseconds, measured by the
  gateway as tokens arrive, and a final event with the last token (its text null),
  `generated_text` and `details`;
- TGI-style /generate, /generate_stream, /: TGI's renderer with MindIE's flavour;
- OpenAI routes: OpenAI's renderer with MindIE's flavour (ids `endpoint_common_N`, the role in
  every delta, finish and usage together in the closing chunk);
- vLLM-style /generate: `{"text": [prompt + " " + completion]}`, streamed as NUL-terminated JSON.
A failure after a stream began is a raw text line, not an event.
"""

import itertools
from dataclasses import replace
from typing import Any

from gateway import jsonutil
from gateway.codec.contract import RenderContext
from gateway.codec.frames import filled_texts, template_pieces
from gateway.dialects.openai import render as openai
from gateway.dialects.tgi import render as tgi
from gateway.neutral.errors import GatewayError
from gateway.neutral.events import Event, TextDelta, expand
from gateway.neutral.types import Answer, Finish, Request, Result, Usage

_dumps = jsonutil.dumps
_ids = itertools.count(1)


def next_id(ctx: RenderContext | None = None) -> str:
    return f"endpoint_common_{next(_ids)}"


def raw_error(err: GatewayError) -> bytes:
    """MindIE reports a failure after the stream began as a raw text line, not an SSE event."""
    return err.message.replace("\n", " ").encode() + b"\n"


def usage(u: Usage | None) -> dict[str, Any] | None:
    """MindIE's usage object: OpenAI's fields, details next to their counts."""
    if u is None or u.prompt_tokens is None or u.completion_tokens is None:
        return None
    out: dict[str, Any] = {"prompt_tokens": u.prompt_tokens}
    if u.extra and "prompt_tokens_details" in u.extra:
        out["prompt_tokens_details"] = u.extra["prompt_tokens_details"]
    out["completion_tokens"] = u.completion_tokens
    if u.extra and "completion_tokens_details" in u.extra:
        out["completion_tokens_details"] = u.extra["completion_tokens_details"]
    out["total_tokens"] = u.prompt_tokens + u.completion_tokens
    return out


OPENAI_ROUTES = openai.Flavour(
    chat_id=next_id,
    completion_id=next_id,
    null_content_with_tools=False,
    always_tool_calls=True,
    completion_stop_reason=True,
    usage=usage,
    held_finish=True,
    error_frame=raw_error,
)

TGI_STYLE = tgi.Flavour(
    name="mindie-tgi",
    space=True,
    index=False,
    prompt_sep=" ",
    prompt_tokens=True,
    input_length=False,
    mindie_token_keys=True,
    unknown_id=None,
    error_frame=raw_error,
)

# The native routes' stream is the TGI-style one without `prompt_tokens` in its details.
NATIVE = replace(TGI_STYLE, name="mindie-native", prompt_tokens=False)


# ---- native ------------------------------------------------------------------------------


def _details(finish: Finish | None, generated: int, ids: list[int] | None, seed: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"finish_reason": tgi.FINISH[finish or Finish.EOS], "generated_tokens": generated}
    if ids:
        d["generated_token_ids"] = ids
    d["seed"] = seed
    return d


def render_infer(result: Answer, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(result, Result)
    c = result.choices[0]
    out: dict[str, Any] = {"generated_text": c.text}
    if tgi.wants_details(req):
        u = result.usage
        generated = u.completion_tokens if u and u.completion_tokens is not None else len(c.token_ids or ())
        out["details"] = _details(c.finish, generated, c.token_ids, req.params.seed)
    return _dumps(out)


# MindIE's framing has the space.
_PREFILL_TOKEN = b'data: {"prefill_time":%b,"decode_time":null,"token":{"id":%b,"text":%b}}\n\n'
_DECODE_TOKEN = b'data: {"prefill_time":null,"decode_time":%b,"token":{"id":%b,"text":%b}}\n\n'
# A token that came with the one before it (0 ms later) and without an id, cut around its text.
_LATER_PRE, _LATER_POST = (_DECODE_TOKEN % (b"0.0", b"null", b"\0")).split(b"\0")
_LATER_BETWEEN = _LATER_POST + _LATER_PRE
# The same with an id: around the id and the text.
_LATER = template_pieces(_DECODE_TOKEN % (b"0.0", b"%b", b"%b"), 2)


class NativeStreamRenderer(tgi.HoldBackRenderer):
    timed = True

    def __init__(self, req: Request, ctx: RenderContext) -> None:
        super().__init__(NATIVE, req, ctx)
        self._first = True

    def _prefill(self) -> bool:
        """Whether the next event's wait is its prefill_time (the first token's), else its
        decode_time (every later one's)."""
        first, self._first = self._first, False
        return first

    def token_frame(self, d: TextDelta, ms: float) -> bytes:
        template = _PREFILL_TOKEN if self._prefill() else _DECODE_TOKEN
        ids = d.token_ids
        # Tokens read together after the first came 0 ms after it (and round is slow).
        time = _dumps(round(ms, 2)) if ms else b"0.0"
        return template % (time, _dumps(tgi.ids_value(ids, None)) if ids else b"null", _dumps(d.text))

    def token_frames(self, texts: list[str], ms: float, ids: list[int] | None) -> bytes:
        # The first as token_frame writes it; the others came with it, 0 ms later.
        if not texts:
            return b""
        first = self.token_frame(TextDelta(texts[0], 0, None, None if ids is None else ids[:1]), ms)
        if len(texts) < 2:
            return first
        if ids is None:
            return first + _LATER_PRE + jsonutil.strings_joined(texts[1:], _LATER_BETWEEN) + _LATER_POST
        return first + filled_texts(_LATER, [jsonutil.numbers(ids[1:])], texts[1:])

    def final_event(
        self, last: TextDelta | None, ms: float, text: str, details: dict[str, Any] | None
    ) -> dict[str, Any]:
        prefill = decode = None
        if last is not None:
            if self._prefill():
                prefill = round(ms, 2)
            else:
                decode = round(ms, 2)
        return {
            "prefill_time": prefill,
            "decode_time": decode,
            "generated_text": text,
            "details": details,
            "token": {"id": tgi.ids_value(last.token_ids if last else None, None), "text": None},
        }


# ---- vLLM-style /generate ----------------------------------------------------------------


def render_vllm(result: Answer, req: Request, ctx: RenderContext) -> bytes:
    """`{"text": [prompt + " " + completion, ...]}`: MindIE joins the two with one space."""
    assert isinstance(result, Result)
    prompt = req.prompt if isinstance(req.prompt, str) else ""
    return _dumps({"text": [prompt + " " + c.text for c in result.choices]})


class VllmStreamRenderer:
    """NUL-terminated JSON objects `{"text": [delta]}` (not SSE); no finish marker."""

    content_type = "application/json"

    def __init__(self, req: Request, ctx: RenderContext) -> None:
        self._n = req.params.choices

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        out = []
        for ev in expand(events):
            if type(ev) is TextDelta:
                assert isinstance(ev, TextDelta)
                texts = [""] * self._n
                if ev.index < self._n:
                    texts[ev.index] = ev.text
                out.append(_dumps({"text": texts}) + b"\0")
        return b"".join(out)

    def error(self, err: GatewayError) -> bytes:
        return raw_error(err)

    def end(self) -> bytes:
        return b""
