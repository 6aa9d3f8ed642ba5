"""OpenAI-shaped answers, for the OpenAI dialect and the two that copy its shapes (MindIE's OpenAI
routes, Databricks): whole responses and SSE chunk streams, one renderer each, with a `Flavour`
holding the ways the copies differ. See docs/dialects/openai.md.

Stream renderers build each chunk from byte templates fixed when the stream starts, so a token
costs one JSON string encode and a few concatenations.
"""

import base64
import struct
from collections.abc import Callable
from typing import Any

from gateway import jsonutil
from gateway.codec.contract import RenderContext, StreamRenderer
from gateway.codec.errors import ErrorTable
from gateway.neutral.errors import GatewayError, Kind
from gateway.neutral.events import (
    Event,
    FinishEvent,
    Frame,
    ReasoningDelta,
    TextDelta,
    TextRun,
    ToolCallDelta,
    UsageEvent,
    expand,
)
from gateway.neutral.types import Answer, EmbeddingResult, Finish, Request, Result, Task, Usage
from gateway.records import record
from gateway.sse import DONE_FRAME

_dumps = jsonutil.dumps
# A text that cannot be a model's, and so marks where a text goes in a rendered frame.
_MARK = "\x00gateway-text\x00"
_MARK_JSON = _dumps(_MARK)


def usage_object(u: Usage | None) -> dict[str, Any] | None:
    """OpenAI's usage object, or None when the counts are not known (never invented)."""
    if u is None or u.prompt_tokens is None or u.completion_tokens is None:
        return None
    out: dict[str, Any] = {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }
    if u.extra:
        for k in ("prompt_tokens_details", "completion_tokens_details"):
            if k in u.extra:
                out[k] = u.extra[k]
    return out


def error_object(err: GatewayError) -> dict[str, Any]:
    return {"message": err.message, "type": ERRORS[err.kind][1], "param": err.param, "code": err.code}


def error_frame(err: GatewayError) -> bytes:
    return b"data: " + _dumps({"error": error_object(err)}) + b"\n\n"


# OpenAI's error `type` for each kind; the status is the error's own.
ERRORS: ErrorTable = {
    Kind.VALIDATION: (None, "invalid_request_error"),
    Kind.AUTH: (None, "invalid_request_error"),
    Kind.PERMISSION: (None, "invalid_request_error"),
    Kind.NOT_FOUND: (None, "invalid_request_error"),
    Kind.TOO_LARGE: (None, "invalid_request_error"),
    Kind.CLIENT_TIMEOUT: (None, "invalid_request_error"),
    Kind.UNSUPPORTED: (None, "invalid_request_error"),
    Kind.RATE_LIMIT: (None, "rate_limit_exceeded"),
    Kind.OVERLOADED: (None, "server_error"),
    Kind.UPSTREAM: (None, "server_error"),
    Kind.TIMEOUT: (None, "server_error"),
    Kind.UNAVAILABLE: (None, "server_error"),
    Kind.INTERNAL: (None, "server_error"),
}


@record
class Flavour:
    """How a dialect's copy of OpenAI's shapes differs from OpenAI's own."""

    chat_id: Callable[[RenderContext], str]
    completion_id: Callable[[RenderContext], str]
    chat_object: str = "chat.completion"
    completion_model: bool = True  # whole completions name the model
    null_content_with_tools: bool = True  # content is null in an answer that is only tool calls
    always_tool_calls: bool = False  # message.tool_calls even when empty
    # How the model's reasoning is written: OpenAI-style servers' `reasoning_content` field, or
    # Databricks' content parts (a `reasoning` part with its summary text, then a `text` part).
    reasoning_parts: bool = False
    logprobs_when_set: bool = False  # a choice's logprobs only when there are some (after finish_reason)
    completion_stop_reason: bool = False  # completion choices carry `stop_reason` (and null logprobs)
    usage: Callable[[Usage | None], dict[str, Any] | None] = usage_object
    # Streams: finish reasons (and usage) held to the closing chunks, every delta repeating the
    # role, no null logprobs, and nothing more after an error.
    held_finish: bool = False
    error_frame: Callable[[GatewayError], bytes] = error_frame
    # Same-wire pass-through streams forward the usage-only chunk whether or not the client asked.
    passthrough_usage: bool = False


# The finish words OpenAI's clients know, for each canonical reason.
FINISH: dict[Finish, str] = {
    Finish.EOS: "stop",
    Finish.STOP_STRING: "stop",
    Finish.STOP_TOKEN: "stop",
    Finish.LENGTH: "length",
    Finish.TOOL_CALLS: "tool_calls",
    Finish.CONTENT_FILTER: "content_filter",
    Finish.ABORT: "stop",
    Finish.ERROR: "stop",
    Finish.UNKNOWN: "stop",
}

OPENAI = Flavour(chat_id=lambda ctx: "chatcmpl-" + ctx.request_id, completion_id=lambda ctx: "cmpl-" + ctx.request_id)


def _finish(reason: Finish | None) -> str:
    return FINISH[reason or Finish.EOS]


def _with_usage(out: dict[str, Any], fl: Flavour, usage: Usage | None) -> bytes:
    u = fl.usage(usage)
    if u is not None:
        out["usage"] = u
    return _dumps(out)


def reasoning_part(text: str) -> dict[str, Any]:
    return {"type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}


def render_chat(fl: Flavour, result: Result, ctx: RenderContext) -> bytes:
    choices = []
    for c in result.choices:
        content = c.text if (c.text or not c.tool_calls or not fl.null_content_with_tools) else None
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if c.reasoning is not None:
            if fl.reasoning_parts:
                msg["content"] = [reasoning_part(c.reasoning), {"type": "text", "text": content or ""}]
            else:
                msg["reasoning_content"] = c.reasoning
        if c.tool_calls or fl.always_tool_calls:
            msg["tool_calls"] = c.tool_calls or []
        lp = {"content": c.logprobs} if c.logprobs is not None else None
        if fl.logprobs_when_set:
            choice: dict[str, Any] = {"index": c.index, "message": msg, "finish_reason": _finish(c.finish)}
            if lp is not None:
                choice["logprobs"] = lp
        else:
            choice = {"index": c.index, "message": msg, "logprobs": lp, "finish_reason": _finish(c.finish)}
        choices.append(choice)
    out = {"id": fl.chat_id(ctx), "object": fl.chat_object, "created": ctx.created, "model": ctx.model}
    out["choices"] = choices
    return _with_usage(out, fl, result.usage)


def completion_logprobs(entries: list[dict[str, Any]] | None, offset: int = 0) -> dict[str, Any] | None:
    """Neutral per-token logprobs (OpenAI chat form) to the legacy completions form."""
    if entries is None:
        return None
    tokens, lps, tops, offsets = [], [], [], []
    pos = offset
    for e in entries:
        tokens.append(e["token"])
        lps.append(e.get("logprob"))
        tops.append({t["token"]: t["logprob"] for t in e.get("top_logprobs") or ()})
        offsets.append(pos)
        pos += len(e["token"])
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def render_completion(fl: Flavour, result: Result, ctx: RenderContext) -> bytes:
    choices = []
    for c in result.choices:
        choice: dict[str, Any] = {"index": c.index, "text": c.text}
        if fl.completion_stop_reason:
            choice.update(logprobs=None, stop_reason=None)
        elif not fl.logprobs_when_set:
            choice["logprobs"] = completion_logprobs(c.logprobs)
        choice["finish_reason"] = _finish(c.finish)
        if fl.logprobs_when_set and c.logprobs is not None:
            choice["logprobs"] = completion_logprobs(c.logprobs)
        choices.append(choice)
    out: dict[str, Any] = {"id": fl.completion_id(ctx), "object": "text_completion", "created": ctx.created}
    if fl.completion_model:
        out["model"] = ctx.model
    out["choices"] = choices
    return _with_usage(out, fl, result.usage)


def _b64(vec: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()


def _floats(b64: str) -> list[float]:
    raw = base64.b64decode(b64)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def embedding_data(result: EmbeddingResult, base64_vectors: bool) -> list[dict[str, Any]]:
    data = []
    for i, vec in enumerate(result.data):
        if base64_vectors and not isinstance(vec, str):
            vec = _b64(vec)
        elif not base64_vectors and isinstance(vec, str):
            vec = _floats(vec)
        data.append({"object": "embedding", "index": i, "embedding": vec})
    return data


def embedding_usage(u: Usage | None) -> dict[str, Any] | None:
    if u is None or u.prompt_tokens is None:
        return None
    return {"prompt_tokens": u.prompt_tokens, "total_tokens": u.prompt_tokens}


def render_embedding(result: EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    data = embedding_data(result, req.params.encoding_format == "base64")
    out: dict[str, Any] = {"object": "list", "data": data, "model": ctx.model}
    usage = embedding_usage(result.usage)
    if usage is not None:
        out["usage"] = usage
    return _dumps(out)


def result_renderer(fl: Flavour) -> Callable[[Answer, Request, RenderContext], bytes]:
    """The whole-answer renderer of one flavour, for every task."""

    def render(result: Answer, req: Request, ctx: RenderContext) -> bytes:
        if isinstance(result, EmbeddingResult):
            return render_embedding(result, req, ctx)
        if req.task is Task.CHAT:
            return render_chat(fl, result, ctx)
        return render_completion(fl, result, ctx)

    return render


# ---- streams ---------------------------------------------------------------------------------


def tool_call_delta(ev: ToolCallDelta) -> dict[str, Any]:
    """One streamed tool-call fragment as OpenAI's `delta.tool_calls[]` item."""
    call: dict[str, Any] = {"index": ev.call_index}
    if ev.id is not None:
        call["id"] = ev.id
        call["type"] = "function"
    fn: dict[str, Any] = {} if ev.name is None else {"name": ev.name}
    fn["arguments"] = ev.arguments
    call["function"] = fn
    return call


class ChunkStream:
    """Chat or completion chunks: `data: {id, object, created, model, choices: [...]}` per event,
    the usage chunk when the client asked, then `[DONE]`. With a held-finish flavour (MindIE)
    finish reasons and usage go out together in the closing chunks instead."""

    content_type = "text/event-stream"

    def __init__(self, fl: Flavour, req: Request, ctx: RenderContext) -> None:
        self._fl = fl
        self._chat = req.task is Task.CHAT
        chunk_id = fl.chat_id(ctx) if self._chat else fl.completion_id(ctx)
        head: dict[str, Any] = {"id": chunk_id, "object": "chat.completion.chunk" if self._chat else "text_completion"}
        head.update(created=ctx.created, model=ctx.model)
        self._head = b"data: " + _dumps(head)[:-1]
        self._include_usage = req.include_usage
        self._tail = b',"usage":null}\n\n' if req.include_usage and not fl.held_finish else b"}\n\n"
        self._role = b'"role":"assistant",' if fl.held_finish else b""
        self._null_lp = b"" if fl.held_finish else b',"logprobs":null'
        self._extra = b',"logprobs":null,"stop_reason":null' if fl.completion_stop_reason else b""
        self._n = req.params.choices
        self._usage: Usage | None = None
        self._finishes: dict[int, Finish] = {}
        self._failed = False
        # The usual event, the first choice's text and nothing else: its frame is the one the
        # general rules below give, cut around the text's JSON string.
        self._text_pre, self._text_post = self._frame(self._delta(TextDelta(_MARK)) or b"").split(_MARK_JSON)
        self._between = self._text_post + self._text_pre

    def _frame(self, choice: bytes, usage: bytes = b"") -> bytes:
        if self._fl.held_finish:
            return self._head + usage + b',"choices":[' + choice + b"]}\n\n"
        return self._head + b',"choices":[' + choice + b"]" + self._tail

    def start(self) -> bytes:
        if not self._chat:
            return b""
        return b"".join(
            self._frame(b'{"index":%d,"delta":{"role":"assistant","content":""}%b,"finish_reason":null}' % (i, lp))
            for i in range(self._n)
            for lp in (self._null_lp,)
        )

    def _delta(self, ev: Event) -> bytes | None:
        """The `choices[]` item for a content, reasoning or tool-call event, or None."""
        t = type(ev)
        if t is TextDelta:
            assert isinstance(ev, TextDelta)
            if not self._chat:
                lp = b"null" if ev.logprobs is None else _dumps(completion_logprobs(ev.logprobs))
                extra = self._extra if self._extra else b',"logprobs":' + lp
                return b'{"index":%d,"text":%b%b,"finish_reason":null}' % (ev.index, _dumps(ev.text), extra)
            lp = b',"logprobs":' + _dumps({"content": ev.logprobs}) if ev.logprobs is not None else self._null_lp
            delta = b'{%b"content":%b}' % (self._role, _dumps(ev.text))
        elif t is ReasoningDelta and self._chat:
            assert isinstance(ev, ReasoningDelta)
            if self._fl.reasoning_parts:
                delta = b'{%b"content":[%b]}' % (self._role, _dumps(reasoning_part(ev.text)))
            else:
                delta = b'{%b"reasoning_content":%b}' % (self._role, _dumps(ev.text))
            lp = self._null_lp
        elif t is ToolCallDelta and self._chat:
            assert isinstance(ev, ToolCallDelta)
            delta, lp = b'{%b"tool_calls":[%b]}' % (self._role, _dumps(tool_call_delta(ev))), self._null_lp
        else:
            return None
        return b'{"index":%d,"delta":%b%b,"finish_reason":null}' % (ev.index, delta, lp)

    def _finish_choice(self, index: int, reason: Finish) -> bytes:
        word = _finish(reason).encode()
        if not self._chat:
            extra = self._extra or b',"logprobs":null'
            return b'{"index":%d,"text":""%b,"finish_reason":"%b"}' % (index, extra, word)
        if self._fl.held_finish:
            return b'{"index":%d,"delta":{"role":"assistant","content":""},"finish_reason":"%b"}' % (index, word)
        return b'{"index":%d,"delta":{},"logprobs":null,"finish_reason":"%b"}' % (index, word)

    def render(self, events: list[Event]) -> bytes:
        parts = []
        pre, post = self._text_pre, self._text_post
        for ev in events:
            if type(ev) is TextDelta and not ev.index and ev.logprobs is None:
                parts.append(pre + _dumps(ev.text) + post)
                continue
            if type(ev) is TextRun:
                if ev.index:
                    parts.append(self.render(expand([ev])))
                else:
                    parts.append(pre + jsonutil.strings_joined(ev.texts, self._between) + post)
                continue
            choice = self._delta(ev)
            if choice is not None:
                parts.append(self._frame(choice))
            elif type(ev) is FinishEvent:
                assert isinstance(ev, FinishEvent)
                if self._fl.held_finish:
                    self._finishes[ev.index] = ev.reason
                else:
                    parts.append(self._frame(self._finish_choice(ev.index, ev.reason)))
            elif type(ev) is UsageEvent:
                assert isinstance(ev, UsageEvent)
                self._usage = ev.usage
        return b"".join(parts)

    def error(self, err: GatewayError) -> bytes:
        self._failed = True
        return self._fl.error_frame(err)

    def end(self) -> bytes:
        if self._fl.held_finish:
            if self._failed:
                return b""
            usage = self._fl.usage(self._usage)
            items = sorted(self._finishes.items()) or [(0, Finish.EOS)]
            out = b""
            for k, (index, reason) in enumerate(items):
                u = b',"usage":' + _dumps(usage) if usage is not None and k == len(items) - 1 else b""
                out += self._frame(self._finish_choice(index, reason), u)
            return out + DONE_FRAME
        usage = self._fl.usage(self._usage) if self._include_usage else None
        if usage is None:
            return DONE_FRAME
        return self._head + b',"choices":[],"usage":' + _dumps(usage) + b"}\n\n" + DONE_FRAME


class PassthroughStream:
    """Upstream chunks of the client's own wire, forwarded byte for byte.

    The gateway always asks the upstream for usage (for its metrics); the usage-only chunk that
    produces is withheld from clients that did not ask for it, unless the flavour forwards it.
    A server that sends usage puts `system_fingerprint` on the usage chunk instead of the
    finishing ones (vLLM does): so from the first finishing chunk on, chunks wait for the usage
    chunk, and go out with its fingerprint added where the server would have put it.
    """

    content_type = "text/event-stream"

    def __init__(self, fl: Flavour, req: Request) -> None:
        self._fl = fl
        self._include_usage = req.include_usage or fl.passthrough_usage
        self._held: list[bytes] | None = None
        self._finals: list[int] = []  # which held chunks finish a choice

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        parts: list[bytes] = []
        for ev in events:
            if type(ev) is not Frame:
                continue
            assert isinstance(ev, Frame)
            if self._include_usage:
                parts.append(ev.payload)
            elif ev.usage_only:
                parts.append(self._release(ev.fingerprint))
            elif self._held is not None or ev.final:
                held = self._held if self._held is not None else []
                if ev.final:
                    self._finals.append(len(held))
                held.append(ev.payload)
                self._held = held
            else:
                parts.append(ev.payload)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _release(self, fingerprint: str | None) -> bytes:
        held, self._held = self._held or [], None
        if fingerprint is not None:
            tail = b',"system_fingerprint":' + _dumps(fingerprint) + b"}\n\n"
            for i in self._finals:
                if b'"system_fingerprint"' not in held[i] and held[i].endswith(b"}\n\n"):
                    held[i] = held[i][:-3] + tail
        self._finals = []
        return b"".join(held)

    def error(self, err: GatewayError) -> bytes:
        return self._release(None) + self._fl.error_frame(err)

    def end(self) -> bytes:
        return self._release(None) + DONE_FRAME


def stream_renderer(fl: Flavour) -> Callable[[Request, RenderContext], StreamRenderer]:
    """The stream renderer of one flavour: chunks, or the upstream's own on a pass-through."""

    def make(req: Request, ctx: RenderContext) -> StreamRenderer:
        return PassthroughStream(fl, req) if ctx.passthrough else ChunkStream(fl, req, ctx)

    return make
