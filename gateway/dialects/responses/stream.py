"""Responses API streams as they are rendered live: neutral events into OpenAI's events (one
output item at a time: reasoning, message, tool calls), and a backend's own Responses stream
handed over as it came. Both keep what they streamed once it ended whole. See
docs/dialects/responses.md.
"""

import re
from typing import Any

from gateway import jsonutil
from gateway.codec.contract import Caller, RenderContext, StreamRenderer
from gateway.codec.frames import filled_texts
from gateway.dialects.responses import stored
from gateway.dialects.responses.render import (
    CONTENT_TYPE,
    Ids,
    Writer,
    base_id,
    call_item,
    failure,
    final_event,
    logprobs_of,
    message_item,
    outcome,
    reasoning_item,
    response_object,
    text_part,
    tool_table,
)
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
)
from gateway.neutral.types import Finish, Request, Usage

_dumps = jsonutil.dumps
# What ends a text delta event without log probabilities.
_TAIL = b',"logprobs":[]}\n\n'


class _Call:
    """A tool call being streamed: its item opens once its name is known."""

    __slots__ = ("arguments", "call_id", "index", "item", "name")

    def __init__(self) -> None:
        self.call_id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []
        self.index = -1
        self.item: dict[str, Any] | None = None


class ResponseStream:
    """A translated answer as the Responses API streams it."""

    content_type = CONTENT_TYPE

    def __init__(self, req: Request, ctx: RenderContext) -> None:
        self._req = req
        self._ctx = ctx
        self._w = Writer()
        self._ids = Ids(base_id(ctx))
        self._tools = tool_table(req)
        self._output: list[dict[str, Any]] = []
        self._open: str | None = None  # "message" or "reasoning": the item text goes to
        self._item_id = ""
        self._texts: list[str] = []
        self._logprobs: list[dict[str, Any]] = []
        self._calls: dict[int, _Call] = {}
        self._finish: Finish | None = None
        self._usage: Usage | None = None
        self._failed = False
        self._final: dict[str, Any] | None = None
        self._pre = self._post = b""

    def _response(self, status: str, **more: Any) -> dict[str, Any]:
        return response_object(
            self._req, self._ctx, status, self._output, self._usage if status != "in_progress" else None, **more
        )

    def start(self) -> bytes:
        head = self._response("in_progress")
        return self._w.lifecycle("response.created", {**head, "output": []}) + self._w.lifecycle(
            "response.in_progress", {**head, "output": []}
        )

    # -- the item text goes to ------------------------------------------------------------

    def _open_text(self, kind: str) -> bytes:
        out = self._close_text()
        self._open = kind
        self._item_id = self._ids.new("msg" if kind == "message" else "rs")
        index = len(self._output)
        self._output.append({})  # filled in when the item is done
        if kind == "message":
            opening = {
                "id": self._item_id,
                "type": "message",
                "status": "in_progress",
                "content": [],
                "role": "assistant",
            }
            out += self._w.added(index, opening, text_part(""))
            event = b"response.output_text.delta"
        else:
            out += self._w.added(
                index, {"id": self._item_id, "type": "reasoning", "summary": []}, {"type": "reasoning_text", "text": ""}
            )
            event = b"response.reasoning_text.delta"
        # The delta's frame around its sequence number and its text.
        self._pre = b"event: " + event + b'\ndata: {"type":"' + event + b'","sequence_number":'
        self._post = b',"item_id":"%b","output_index":%d,"content_index":0,"delta":' % (self._item_id.encode(), index)
        return out

    def _delta(self, text: str, logprobs: Any = None) -> bytes:
        seq = self._w.seq
        self._w.seq = seq + 1
        self._texts.append(text)
        if self._open != "message":
            return self._pre + str(seq).encode() + self._post + _dumps(text) + b"}\n\n"
        if logprobs is None:
            return self._pre + str(seq).encode() + self._post + _dumps(text) + b',"logprobs":[]}\n\n'
        entries = logprobs_of(logprobs)
        self._logprobs += entries
        return self._pre + str(seq).encode() + self._post + _dumps(text) + b',"logprobs":' + _dumps(entries) + b"}\n\n"

    def _close_text(self, status: str = "completed") -> bytes:
        """The events that end the open reasoning or message item (its item kept in the output)."""
        kind, self._open = self._open, None
        if kind is None:
            return b""
        index = len(self._output) - 1
        text = "".join(self._texts)
        self._texts = []
        if kind == "message":
            item = message_item(self._item_id, text, status, self._logprobs)
            self._logprobs = []
            self._output[index] = item
            return self._w.text_done(index, item)
        item = reasoning_item(self._item_id, text)
        self._output[index] = item
        return self._w.reasoning_done(index, item)

    # -- tool calls -------------------------------------------------------------------------

    def _call(self, ev: ToolCallDelta) -> bytes:
        out = self._close_text()
        call = self._calls.get(ev.call_index)
        if call is None:
            call = self._calls[ev.call_index] = _Call()
        if ev.id and call.call_id is None:
            call.call_id = ev.id
        if ev.name and call.name is None:
            call.name = ev.name
        if ev.arguments:
            call.arguments.append(ev.arguments)
        if call.item is None and call.name is not None:
            out += self._open_call(call)
            if call.item is not None and call.item["type"] == "function_call" and call.arguments:
                out += self._w.call_delta(call.index, call.item, "".join(call.arguments))
        elif call.item is not None and call.item["type"] == "function_call" and ev.arguments:
            out += self._w.call_delta(call.index, call.item, ev.arguments)
        return out

    def _open_call(self, call: _Call) -> bytes:
        item = call_item(self._tools, self._ids, call.name or "", call.call_id, "", "in_progress")
        call.item = item
        call.index = len(self._output)
        self._output.append(item)
        opening = {**item, "input": ""} if item["type"] == "custom_tool_call" else item
        return self._w.added(call.index, opening)

    def _close_calls(self) -> bytes:
        out = b""
        for call in self._calls.values():
            if call.item is None:
                out += self._open_call(call)
            assert call.item is not None
            arguments = "".join(call.arguments)
            final = call_item(self._tools, self._ids, call.name or "", call.item["call_id"], arguments, "completed")
            final["id"] = call.item["id"]
            if final["type"] == "custom_tool_call" and final["input"]:
                out += self._w.call_delta(call.index, final, final["input"])
            self._output[call.index] = final
            out += self._w.call_done(call.index, final)
        self._calls = {}
        return out

    # -- the stream ---------------------------------------------------------------------------

    def render(self, events: list[Event]) -> bytes:
        parts: list[bytes] = []
        w = self._w
        for ev in events:
            t = type(ev)
            if type(ev) is TextDelta and self._open == "message" and ev.logprobs is None and not ev.index and ev.text:
                # The usual event: the next piece of the open message's text.
                seq = w.seq
                w.seq = seq + 1
                self._texts.append(ev.text)
                parts.append(self._pre + b"%d" % seq + self._post + _dumps(ev.text) + _TAIL)
                continue
            if t is TextDelta:
                assert isinstance(ev, TextDelta)
                if ev.index or not ev.text:
                    continue
                if self._open != "message":
                    parts.append(self._open_text("message"))
                parts.append(self._delta(ev.text, ev.logprobs))
            elif t is TextRun:
                assert isinstance(ev, TextRun)
                texts = list(filter(None, ev.texts))
                if ev.index or not texts:
                    continue
                if self._open != "message":
                    parts.append(self._open_text("message"))
                # A run of the open message's text pieces, each its own delta event.
                seq = w.seq
                w.seq = seq + len(texts)
                self._texts += texts
                numbers = jsonutil.counted(seq, w.seq)
                parts.append(filled_texts((self._pre, self._post, _TAIL), [numbers], texts))
            elif t is ReasoningDelta:
                assert isinstance(ev, ReasoningDelta)
                if ev.index or not ev.text:
                    continue
                if self._open != "reasoning":
                    parts.append(self._open_text("reasoning"))
                parts.append(self._delta(ev.text))
            elif t is ToolCallDelta:
                assert isinstance(ev, ToolCallDelta)
                if not ev.index:
                    parts.append(self._call(ev))
            elif t is FinishEvent:
                assert isinstance(ev, FinishEvent)
                if not ev.index:
                    self._finish = ev.reason
            elif t is UsageEvent:
                assert isinstance(ev, UsageEvent)
                self._usage = ev.usage
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def error(self, err: GatewayError) -> bytes:
        self._failed = True
        if self._open is not None:
            # The item cut short is in the failed response as far as it came, without its events.
            self._close_text("incomplete")
        return self._w.lifecycle("response.failed", self._response("failed", error=failure(err)))

    def end(self) -> bytes:
        if self._failed:
            return b""
        status, reason = outcome(self._finish)
        out = self._close_text(status)
        out += self._close_calls()
        if not self._output:
            # Nothing came: an empty message, as a whole answer would have.
            out += self._open_text("message") + self._close_text(status)
        self._final = self._response(status, incomplete=reason)
        return out + self._w.lifecycle(final_event(status), self._final)

    async def keep(self, caller: Caller) -> None:
        if self._final is not None and stored.wanted(self._req.raw):
            await stored.save(caller, self._final, stored.input_of(self._req))


# An event's own sequence number (a key with its quotes unescaped is no string's content).
_SEQUENCE = re.compile(rb'"sequence_number":(\d+)')


class PassthroughStream:
    """A backend's own Responses stream, each event as it came (its model renamed where the
    route renames it); its final response is kept."""

    content_type = CONTENT_TYPE

    def __init__(self, req: Request) -> None:
        self._req = req
        self._last = b""  # the frames last relayed
        self._frames = 0
        self._final = b""  # the final event as it came, read only when it is kept

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        parts: list[bytes] = []
        for ev in events:
            if type(ev) is Frame:
                assert isinstance(ev, Frame)
                parts.append(ev.payload)
                self._last = ev.payload
                self._frames += 1
                if ev.final:
                    self._final = ev.payload
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _next_sequence(self) -> int:
        """The sequence number after the last event relayed: read from that event only when an
        error needs it, rather than each read's events counted as they pass."""
        numbers = _SEQUENCE.findall(self._last)
        return int(numbers[-1]) + 1 if numbers else self._frames

    def error(self, err: GatewayError) -> bytes:
        body = {"type": "error", "code": failure(err)["code"], "message": err.message, "param": err.param}
        return b"event: error\ndata: " + _dumps({**body, "sequence_number": self._next_sequence()}) + b"\n\n"

    def end(self) -> bytes:
        return b""

    async def keep(self, caller: Caller) -> None:
        if self._final and stored.wanted(self._req.raw):
            response = final_response(self._final)
            if response is not None:
                await stored.save(caller, response, stored.input_of(self._req))


def final_response(frame: bytes) -> dict[str, Any] | None:
    """The response object of a stream's final event (framed as it came)."""
    start = frame.find(b"data:")
    if start < 0:
        return None
    try:
        obj = jsonutil.loads(frame[start + 5 :].split(b"\n", 1)[0])
    except jsonutil.JSONDecodeError:
        return None
    response = obj.get("response") if isinstance(obj, dict) else None
    return response if isinstance(response, dict) else None


def stream_renderer(req: Request, ctx: RenderContext) -> StreamRenderer:
    return PassthroughStream(req) if ctx.passthrough else ResponseStream(req, ctx)
