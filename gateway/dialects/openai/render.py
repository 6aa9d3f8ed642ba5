"""OpenAI answers as clients expect them: whole responses and SSE chunk streams.

Stream renderers build each chunk from byte templates fixed when the stream starts, so a token
costs one JSON string encode and a few concatenations.
"""

import base64
import struct
from typing import Any

from gateway import jsonutil
from gateway.core import finish as vocab
from gateway.core.errors import GatewayError
from gateway.core.types import (
    EmbeddingResult,
    Event,
    FinishEvent,
    Frame,
    ReasoningDelta,
    Request,
    Result,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageEvent,
)
from gateway.dialects.base import RenderContext
from gateway.sse import DONE_FRAME

_dumps = jsonutil.dumps


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


def _finish(reason: Any) -> str:
    return vocab.OPENAI[reason] if reason is not None else "stop"


def render_chat(result: Result | EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(result, Result)
    choices = []
    for c in result.choices:
        msg: dict[str, Any] = {"role": "assistant", "content": c.text if (c.text or not c.tool_calls) else None}
        if c.reasoning is not None:
            msg["reasoning_content"] = c.reasoning
        if c.tool_calls:
            msg["tool_calls"] = c.tool_calls
        lp = {"content": c.logprobs} if c.logprobs is not None else None
        choices.append({"index": c.index, "message": msg, "logprobs": lp, "finish_reason": _finish(c.finish)})
    out: dict[str, Any] = {
        "id": "chatcmpl-" + ctx.request_id,
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "choices": choices,
    }
    usage = usage_object(result.usage)
    if usage is not None:
        out["usage"] = usage
    return _dumps(out)


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


def render_completion(result: Result | EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(result, Result)
    choices = [
        {
            "index": c.index,
            "text": c.text,
            "logprobs": completion_logprobs(c.logprobs),
            "finish_reason": _finish(c.finish),
        }
        for c in result.choices
    ]
    out: dict[str, Any] = {
        "id": "cmpl-" + ctx.request_id,
        "object": "text_completion",
        "created": ctx.created,
        "model": ctx.model,
        "choices": choices,
    }
    usage = usage_object(result.usage)
    if usage is not None:
        out["usage"] = usage
    return _dumps(out)


def _b64(vec: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()


def _floats(b64: str) -> list[float]:
    raw = base64.b64decode(b64)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def render_embedding(result: Result | EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(result, EmbeddingResult)
    want_b64 = req.params.get("encoding_format") == "base64"
    data = []
    for i, vec in enumerate(result.data):
        if want_b64 and not isinstance(vec, str):
            vec = _b64(vec)
        elif not want_b64 and isinstance(vec, str):
            vec = _floats(vec)
        data.append({"object": "embedding", "index": i, "embedding": vec})
    out: dict[str, Any] = {"object": "list", "data": data, "model": ctx.model}
    u = result.usage
    if u is not None and u.prompt_tokens is not None:
        out["usage"] = {"prompt_tokens": u.prompt_tokens, "total_tokens": u.prompt_tokens}
    return _dumps(out)


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


def chat_delta_choice(ev: Event, role: bytes = b"", null_logprobs: bool = True) -> bytes | None:
    """The `choices[]` item of a chat chunk for a content, reasoning or tool-call event, or None
    for other events. `role` opens every delta (MindIE repeats `"role":"assistant",`); MindIE
    also leaves out a null `logprobs`."""
    t = type(ev)
    if t is TextDelta:
        assert isinstance(ev, TextDelta)
        if ev.logprobs is not None:
            lp = b',"logprobs":' + _dumps({"content": ev.logprobs})
        else:
            lp = b',"logprobs":null' if null_logprobs else b""
        delta = b'{%b"content":%b}' % (role, _dumps(ev.text))
    elif t is ReasoningDelta:
        assert isinstance(ev, ReasoningDelta)
        delta = b'{%b"reasoning_content":%b}' % (role, _dumps(ev.text))
        lp = b',"logprobs":null' if null_logprobs else b""
    elif t is ToolCallDelta:
        assert isinstance(ev, ToolCallDelta)
        delta = b'{%b"tool_calls":[%b]}' % (role, _dumps(tool_call_delta(ev)))
        lp = b',"logprobs":null' if null_logprobs else b""
    else:
        return None
    return b'{"index":%d,"delta":%b%b,"finish_reason":null}' % (ev.index, delta, lp)


def error_frame(err: GatewayError) -> bytes:
    from gateway.dialects.openai.inbound import error_object

    return b"data: " + _dumps({"error": error_object(err)}) + b"\n\n"


class _ChunkStream:
    """Shared frame plumbing of the chat and completions stream renderers."""

    content_type = "text/event-stream"

    def __init__(self, req: Request, ctx: RenderContext, id_prefix: str, obj: str) -> None:
        head = {"id": id_prefix + ctx.request_id, "object": obj, "created": ctx.created, "model": ctx.model}
        self._head = b"data: " + _dumps(head)[:-1] + b',"choices":['
        self._tail = b'],"usage":null}\n\n' if req.include_usage else b"]}\n\n"
        self._include_usage = req.include_usage
        self._usage: Usage | None = None
        self._n = int(req.params.get("n", 1))

    def _frame(self, choice: bytes) -> bytes:
        return self._head + choice + self._tail

    def error(self, err: GatewayError) -> bytes:
        return error_frame(err)

    def end(self) -> bytes:
        out = b""
        usage = usage_object(self._usage) if self._include_usage else None
        if usage is not None:
            out = self._head + b'],"usage":' + _dumps(usage) + b"}\n\n"
        return out + DONE_FRAME


_ROLE_CHOICE = b'{"index":%d,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}'


class ChatStreamRenderer(_ChunkStream):
    def __init__(self, req: Request, ctx: RenderContext, id_prefix: str = "chatcmpl-") -> None:
        super().__init__(req, ctx, id_prefix, "chat.completion.chunk")

    def start(self) -> bytes:
        return b"".join(
            self._frame(
                b'{"index":%d,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}' % i
            )
            for i in range(self._n)
        )

    def render(self, events: list[Event]) -> bytes:
        parts = []
        for ev in events:
            t = type(ev)
            choice = chat_delta_choice(ev)
            if choice is not None:
                parts.append(self._frame(choice))
            elif t is FinishEvent:
                assert isinstance(ev, FinishEvent)
                parts.append(
                    self._frame(
                        b'{"index":%d,"delta":{},"logprobs":null,"finish_reason":"%b"}'
                        % (ev.index, vocab.OPENAI[ev.reason].encode())
                    )
                )
            elif t is UsageEvent:
                assert isinstance(ev, UsageEvent)
                self._usage = ev.usage
        return b"".join(parts)


class CompletionStreamRenderer(_ChunkStream):
    def __init__(self, req: Request, ctx: RenderContext, id_prefix: str = "cmpl-") -> None:
        super().__init__(req, ctx, id_prefix, "text_completion")

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        parts = []
        for ev in events:
            t = type(ev)
            if t is TextDelta:
                assert isinstance(ev, TextDelta)
                lp = b"null" if ev.logprobs is None else _dumps(completion_logprobs(ev.logprobs))
                parts.append(
                    self._frame(
                        b'{"index":%d,"text":%b,"logprobs":%b,"finish_reason":null}' % (ev.index, _dumps(ev.text), lp)
                    )
                )
            elif t is FinishEvent:
                assert isinstance(ev, FinishEvent)
                parts.append(
                    self._frame(
                        b'{"index":%d,"text":"","logprobs":null,"finish_reason":"%b"}'
                        % (ev.index, vocab.OPENAI[ev.reason].encode())
                    )
                )
            elif t is UsageEvent:
                assert isinstance(ev, UsageEvent)
                self._usage = ev.usage
        return b"".join(parts)


class PassthroughStreamRenderer:
    """OpenAI upstream to OpenAI client: upstream chunks are forwarded byte for byte.

    The gateway always asks the upstream for usage (for its metrics); the usage-only chunk that
    produces is withheld from clients that did not ask for it.
    """

    content_type = "text/event-stream"

    def __init__(self, req: Request, ctx: RenderContext) -> None:
        self._include_usage = req.include_usage

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        parts = []
        for ev in events:
            if type(ev) is Frame:
                assert isinstance(ev, Frame)
                if self._include_usage or not ev.usage_only:
                    parts.append(b"data: " + ev.payload + b"\n\n")
        return b"".join(parts)

    def error(self, err: GatewayError) -> bytes:
        return error_frame(err)

    def end(self) -> bytes:
        return DONE_FRAME


def chat_stream_renderer(req: Request, ctx: RenderContext) -> Any:
    return PassthroughStreamRenderer(req, ctx) if ctx.passthrough else ChatStreamRenderer(req, ctx)


def completion_stream_renderer(req: Request, ctx: RenderContext) -> Any:
    return PassthroughStreamRenderer(req, ctx) if ctx.passthrough else CompletionStreamRenderer(req, ctx)
