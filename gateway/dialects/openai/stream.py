"""OpenAI-shaped streams, for the OpenAI dialect and the two that copy its shapes: SSE chunk
streams rendered from neutral events (`ChunkStream`), and a same-wire pass-through's frames
relayed (`PassthroughStream`), each with the copy's `Flavour` (gateway.dialects.openai.render).

Chunks are built from byte templates fixed when the stream starts, so a token costs one JSON
string encode and a few concatenations.
"""

from collections.abc import Callable
from typing import Any

from gateway import jsonutil
from gateway.codec.contract import RenderContext, StreamRenderer
from gateway.dialects.openai.render import MARK, MARK_JSON, Flavour, completion_logprobs, finish_word, reasoning_part
from gateway.neutral.errors import GatewayError
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
from gateway.neutral.types import Finish, Request, Task, Usage
from gateway.sse import DONE_FRAME

_dumps = jsonutil.dumps


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
        self._text_pre, self._text_post = self._frame(self._delta(TextDelta(MARK)) or b"").split(MARK_JSON)
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
        word = finish_word(reason).encode()
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
    chunk, and go out with its fingerprint added where the server would have put it. A server
    that follows the API's reference (OpenAI's own) also writes `"usage":null` in every other
    chunk once usage is asked for; where the stream's first chunk holds it, the chunks go out
    without it, as the server writes them unasked.
    """

    content_type = "text/event-stream"

    def __init__(self, fl: Flavour, req: Request) -> None:
        self._fl = fl
        self._include_usage = req.include_usage or fl.passthrough_usage
        self._held: list[bytes] | None = None
        self._finals: list[int] = []  # which held chunks finish a choice
        # The null usage field the stream's chunks hold only because usage was asked for: b""
        # when they hold none, None until the first chunk is seen.
        self._null: bytes | None = b"" if self._include_usage else None

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
                continue
            payload, null = ev.payload, self._null
            if null is None and payload.startswith(b"data:"):  # (a comment first tells nothing)
                null = self._null = _null_usage(payload)
            if null:
                payload = payload.replace(null, b"")
            if ev.usage_only:
                parts.append(self._release(ev.fingerprint))
            elif self._held is not None or ev.final:
                held = self._held if self._held is not None else []
                if ev.final:
                    self._finals.append(len(held))
                held.append(payload)
                self._held = held
            else:
                parts.append(payload)
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


# `"usage":null` after another field, as servers write it compactly or with Python's spacing.
_NULL_USAGE = (b',"usage":null', b', "usage": null')


def _null_usage(payload: bytes) -> bytes:
    """The null usage field of the first chunk in `payload` (a stream's first frame), or b"".
    Only a field after another is taken: removed with its comma, the chunk stays valid JSON
    (a field's bytes inside a string are escaped, so never match)."""
    first = payload.find(b"\n\n")
    for null in _NULL_USAGE:
        if payload.find(null, 0, first) >= 0:
            return null
    return b""


def stream_renderer(fl: Flavour) -> Callable[[Request, RenderContext], StreamRenderer]:
    """The stream renderer of one flavour: chunks, or the upstream's own on a pass-through."""

    def make(req: Request, ctx: RenderContext) -> StreamRenderer:
        return PassthroughStream(fl, req) if ctx.passthrough else ChunkStream(fl, req, ctx)

    return make
