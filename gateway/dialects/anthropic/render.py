"""Anthropic answers as its clients expect them: `message` objects, the named event stream, and
`{"type": "error", ...}` bodies. See docs/dialects/anthropic.md.

Fields go in the order the API writes them today (its recorded answers, tests/fixtures/anthropic).
A backend gives no signature for its reasoning: a thinking block's `signature` is empty.
"""

from typing import Any

from gateway import jsonutil
from gateway.codec.contract import RenderContext, StreamRenderer
from gateway.codec.errors import ErrorTable, stated
from gateway.dialects.anthropic.blocks import tool_id, tool_use
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
)
from gateway.neutral.types import Answer, Choice, Finish, Request, Result, Usage

_dumps = jsonutil.dumps

# Anthropic's status and error `type` for each kind (None keeps the error's own status).
ERRORS: ErrorTable = {
    Kind.VALIDATION: (400, "invalid_request_error"),
    Kind.UNSUPPORTED: (400, "invalid_request_error"),
    Kind.AUTH: (401, "authentication_error"),
    Kind.PERMISSION: (403, "permission_error"),
    Kind.NOT_FOUND: (404, "not_found_error"),
    Kind.CLIENT_TIMEOUT: (408, "invalid_request_error"),
    Kind.TOO_LARGE: (413, "request_too_large"),
    Kind.RATE_LIMIT: (429, "rate_limit_error"),
    Kind.OVERLOADED: (529, "overloaded_error"),
    Kind.UPSTREAM: (None, "api_error"),
    Kind.TIMEOUT: (504, "timeout_error"),
    Kind.UNAVAILABLE: (None, "api_error"),
    Kind.INTERNAL: (500, "api_error"),
}

STOP_REASONS = {
    Finish.EOS: "end_turn",
    Finish.STOP_TOKEN: "end_turn",
    Finish.STOP_STRING: "stop_sequence",
    Finish.LENGTH: "max_tokens",
    Finish.TOOL_CALLS: "tool_use",
    Finish.CONTENT_FILTER: "refusal",
    Finish.ABORT: "end_turn",
    Finish.ERROR: "end_turn",
    Finish.UNKNOWN: "end_turn",
}


def error_body(err: GatewayError) -> bytes:
    kind = stated(ERRORS, err)[1]
    return _dumps({"type": "error", "error": {"type": kind, "message": err.message}})


def message_id(ctx: RenderContext) -> str:
    return "msg_" + ctx.request_id


def stop_of(finish: Finish | None, tool_calls: bool) -> str:
    """The stop reason; a backend that ends a turn of tool calls with a plain stop still ends it
    for the tools."""
    if tool_calls and finish in (None, Finish.EOS, Finish.STOP_TOKEN, Finish.TOOL_CALLS):
        return "tool_use"
    return STOP_REASONS[finish or Finish.EOS]


def stop_sequence(finish: Finish | None, req: Request, matched: str | None = None) -> str | None:
    """The stop string that ended the answer: the one the backend or the gateway's own stop
    matching names, else the request's only one (with several and no name: null)."""
    if finish is not Finish.STOP_STRING:
        return None
    if matched is not None:
        return matched
    stops = req.params.stop
    return stops[0] if stops and len(stops) == 1 else None


def usage_object(u: Usage | None) -> dict[str, int]:
    """Anthropic's usage: `input_tokens` are the prompt's tokens the cache did not hold, the
    rest are `cache_read_input_tokens` (what an OpenAI-style backend says of its prefix cache)."""
    prompt = (u.prompt_tokens if u else None) or 0
    cached = 0
    details = (u.extra or {}).get("prompt_tokens_details") if u else None
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        cached = min(details["cached_tokens"], prompt)
    if u and u.extra and isinstance(u.extra.get("cache_read_input_tokens"), int):
        cached = u.extra["cache_read_input_tokens"]
        prompt += cached
    return {
        "input_tokens": prompt - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": (u.completion_tokens if u else None) or 0,
    }


def content_of(choice: Choice, ctx: RenderContext) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if choice.reasoning:
        blocks.append({"type": "thinking", "thinking": choice.reasoning, "signature": ""})
    if choice.text:
        blocks.append({"type": "text", "text": choice.text})
    for k, call in enumerate(choice.tool_calls or ()):
        blocks.append(tool_use(call, f"{ctx.request_id}_{k}"))
    return blocks


def message_object(result: Result, req: Request, ctx: RenderContext) -> dict[str, Any]:
    c = result.choices[0] if result.choices else Choice()
    return {
        "model": ctx.model,
        "id": message_id(ctx),
        "type": "message",
        "role": "assistant",
        "content": content_of(c, ctx),
        "stop_reason": stop_of(c.finish, bool(c.tool_calls)),
        "stop_sequence": stop_sequence(c.finish, req, c.stop),
        "usage": usage_object(result.usage),
    }


def render_result(result: Answer, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(result, Result)
    return _dumps(message_object(result, req, ctx))


# ---- streams ---------------------------------------------------------------------------------


def event(name: bytes, payload: bytes) -> bytes:
    return b"event: " + name + b"\ndata: " + payload + b"\n\n"


PING = event(b"ping", b'{"type": "ping"}')  # spaced as the API writes it


def _delta(kind: bytes, field: bytes) -> bytes:
    """A content_block_delta as a byte template: the block's index, then the JSON value."""
    return (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,"delta":{"type":"'
        + kind
        + b'","'
        + field
        + b'":%b}}\n\n'
    )


_TEXT_DELTA = _delta(b"text_delta", b"text")
_THINKING_DELTA = _delta(b"thinking_delta", b"thinking")
_JSON_DELTA = _delta(b"input_json_delta", b"partial_json")
_STOP = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":%d}\n\n'
_MESSAGE_STOP = event(b"message_stop", b'{"type":"message_stop"}')


class MessageStream:
    """Neutral events as Anthropic's named events. Blocks open as their content comes (thinking,
    text, each tool call) and close when another begins; `message_start` goes first, when the
    stream's first events (or its first ping) are out, so that it can carry the prompt's token
    count where the backend says it early. Only the first choice is rendered (the API has one)."""

    content_type = "text/event-stream"
    # Claude Code gives up on a silent stream: a ping goes out in each silence of this length.
    ping_every_s = 5.0

    def __init__(self, req: Request, ctx: RenderContext) -> None:
        self._req = req
        self._ctx = ctx
        self._started = False
        self._failed = False
        self._blocks = -1  # the index of the last block opened
        self._open: tuple[str, int] | None = None  # what the open block holds: kind and call index
        self._calls: dict[int, int] = {}  # a tool call's index -> its block's
        self._finish: Finish | None = None
        self._stop: str | None = None
        self._usage: Usage | None = None

    def _head(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        message: dict[str, Any] = {
            "model": self._ctx.model,
            "id": message_id(self._ctx),
            "type": "message",
            "role": "assistant",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_object(
                Usage(
                    self._usage.prompt_tokens if self._usage else None, None, self._usage.extra if self._usage else None
                )
            ),
        }
        return event(b"message_start", _dumps({"type": "message_start", "message": message}))

    def start(self) -> bytes:
        return b""

    def ping(self) -> bytes:
        return self._head() + PING

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return _STOP % self._blocks

    def _begin(self, kind: str, block: dict[str, Any], call: int = -1) -> bytes:
        out = self._close()
        self._blocks += 1
        self._open = (kind, call)
        start = {"type": "content_block_start", "index": self._blocks, "content_block": block}
        return out + event(b"content_block_start", _dumps(start))

    def render(self, events: list[Event]) -> bytes:
        out: list[bytes] = []
        if not self._started:
            for ev in events:
                if type(ev) is UsageEvent:
                    assert isinstance(ev, UsageEvent)
                    self._usage = ev.usage
            out.append(self._head())
        for ev in events:
            t = type(ev)
            if t is TextDelta or t is TextRun:
                assert isinstance(ev, TextDelta | TextRun)
                # A run of text pieces is a delta event each, as they came.
                texts = [ev.text] if isinstance(ev, TextDelta) else ev.texts
                if ev.index != 0 or not any(texts):
                    continue
                if self._open is None or self._open[0] != "text":
                    out.append(self._begin("text", {"type": "text", "text": ""}))
                if len(texts) == 1:
                    out.append(_TEXT_DELTA % (self._blocks, _dumps(texts[0])))
                else:
                    # The block's delta cut around its text: the texts encoded together between.
                    pre, post = (_TEXT_DELTA % (self._blocks, b"\0")).split(b"\0")
                    out.append(pre + jsonutil.strings_joined(list(filter(None, texts)), post + pre) + post)
            elif t is ReasoningDelta:
                assert isinstance(ev, ReasoningDelta)
                if ev.index != 0 or not ev.text:
                    continue
                if self._open is None or self._open[0] != "thinking":
                    out.append(self._begin("thinking", {"type": "thinking", "thinking": "", "signature": ""}))
                out.append(_THINKING_DELTA % (self._blocks, _dumps(ev.text)))
            elif t is ToolCallDelta:
                assert isinstance(ev, ToolCallDelta)
                if ev.index == 0:
                    out.append(self._tool(ev))
            elif t is FinishEvent:
                assert isinstance(ev, FinishEvent)
                if ev.index == 0:
                    self._finish, self._stop = ev.reason, ev.stop
            elif t is UsageEvent:
                assert isinstance(ev, UsageEvent)
                self._usage = ev.usage
        return b"".join(out)

    def _tool(self, ev: ToolCallDelta) -> bytes:
        out = b""
        block = self._calls.get(ev.call_index)
        if block is None:
            fallback = f"{self._ctx.request_id}_{ev.call_index}"
            start = {"type": "tool_use", "id": tool_id(ev.id, fallback), "name": ev.name or "", "input": {}}
            out = self._begin("tool", start, ev.call_index)
            block = self._calls[ev.call_index] = self._blocks
        # A fragment of a call whose block is closed (a backend interleaving its calls) still
        # names that block: the API's clients gather deltas by index.
        if ev.arguments:
            out += _JSON_DELTA % (block, _dumps(ev.arguments))
        return out

    def error(self, err: GatewayError) -> bytes:
        self._failed = True
        return event(b"error", error_body(err))

    def end(self) -> bytes:
        if self._failed:
            return b""
        head = self._head()
        stop = stop_of(self._finish, bool(self._calls))
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": stop_sequence(self._finish, self._req, self._stop)},
            "usage": usage_object(self._usage),
        }
        return head + self._close() + event(b"message_delta", _dumps(delta)) + _MESSAGE_STOP


class PassthroughStream:
    """An Anthropic backend's own events, forwarded as they came (the model renamed)."""

    content_type = "text/event-stream"
    ping_every_s = MessageStream.ping_every_s

    def __init__(self, req: Request, ctx: RenderContext) -> None:
        self._failed = False

    def start(self) -> bytes:
        return b""

    def ping(self) -> bytes:
        return PING

    def render(self, events: list[Event]) -> bytes:
        return b"".join([ev.payload for ev in events if type(ev) is Frame])

    def error(self, err: GatewayError) -> bytes:
        return event(b"error", error_body(err))

    def end(self) -> bytes:
        return b""


def stream_renderer(req: Request, ctx: RenderContext) -> StreamRenderer:
    return PassthroughStream(req, ctx) if ctx.passthrough else MessageStream(req, ctx)
