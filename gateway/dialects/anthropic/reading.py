"""Reading a Messages server (Anthropic's API, vLLM's /v1/messages): whole answers, error bodies
and the named event stream, to the neutral form."""

from typing import Any

from gateway import jsonutil
from gateway.codec.errors import error_message_in, message_of
from gateway.codec.finish import FinishWords
from gateway.codec.parsing import EventParser, TokenEvents
from gateway.codec.renaming import renamed
from gateway.codec.textchunks import TextChunks
from gateway.neutral.errors import UpstreamClass, UpstreamError
from gateway.neutral.events import Event, FinishEvent, Frame, ReasoningDelta, TextDelta, ToolCallDelta, UsageEvent
from gateway.neutral.types import Choice, Finish, Result, Usage

# A Messages stream's text deltas, which a pass-through relays undecoded.
_TEXT_DELTAS = TokenEvents(b"content_block_delta")

FINISH_WORDS = FinishWords(
    {
        "end_turn": Finish.EOS,
        "max_tokens": Finish.LENGTH,
        "stop_sequence": Finish.STOP_STRING,
        "tool_use": Finish.TOOL_CALLS,
        "refusal": Finish.CONTENT_FILTER,
        "pause_turn": Finish.ABORT,
        "model_context_window_exceeded": Finish.LENGTH,
    }
)


# The message of Anthropic's error body, or of the OpenAI-shaped one vLLM sends when it refuses
# a body before reading it as Messages: both put it where most servers do.
error_text = error_message_in


def error_message(body: bytes) -> str:
    return message_of(body, error_text)


def usage_from(obj: Any, prompt: int | None = None) -> Usage | None:
    """Neutral usage: the prompt's tokens are all its input tokens, cached or not."""
    if not isinstance(obj, dict):
        return None
    inputs = [obj.get(k) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    counted = [v for v in inputs if isinstance(v, int)]
    cached = obj.get("cache_read_input_tokens")
    extra = {"cache_read_input_tokens": cached} if isinstance(cached, int) and cached else None
    total = sum(counted) if counted else prompt
    out = obj.get("output_tokens")
    return Usage(total, out if isinstance(out, int) else None, extra)


def _call(block: dict[str, Any]) -> dict[str, Any]:
    arguments = jsonutil.dumps(block.get("input") or {}).decode()
    return {"id": block.get("id"), "type": "function", "function": {"name": block.get("name"), "arguments": arguments}}


def _text_or_none(value: object) -> str | None:
    return value if type(value) is str else None


def parse_body(body: bytes) -> Result:
    obj = jsonutil.loads(body)
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    if obj.get("type") == "error":
        raise UpstreamError(f"backend error: {error_text(obj)}", upstream_class=UpstreamClass.PROTOCOL)
    blocks = [b for b in obj["content"] if isinstance(b, dict)]
    text = "".join(b.get("text") or "" for b in blocks if b.get("type") == "text")
    reasoning = "".join(b.get("thinking") or "" for b in blocks if b.get("type") == "thinking")
    calls = [_call(b) for b in blocks if b.get("type") == "tool_use"]
    choice = Choice(
        text=text,
        reasoning=reasoning or None,
        tool_calls=calls or None,
        finish=FINISH_WORDS.read(obj.get("stop_reason")),
        stop=_text_or_none(obj.get("stop_sequence")),
    )
    return Result([choice], usage_from(obj.get("usage")), obj.get("model"))


def passthrough_body(body: bytes, rename: bytes | None) -> Result:
    """A same-wire answer: only what the metrics and traces need is read."""
    obj = jsonutil.loads(body)
    if not isinstance(obj, dict) or not isinstance(obj.get("content"), list):
        raise ValueError("not a message")
    out = body if rename is None else renamed(body, "model", rename)
    finish = FINISH_WORDS.read(obj.get("stop_reason"))
    return Result([Choice(finish=finish)], usage_from(obj.get("usage")), obj.get("model"), out)


class MessagesStreamParser(EventParser):
    """Named events to neutral ones; on a pass-through, each event goes out as well, with the
    lines it came with (the model renamed in `message_start`). Events read before a fault are
    handed out first, and the fault is raised on the next call (as gateway.codec.parsing does).
    Translated, a text block's deltas are read from their template (gateway.codec.textchunks)."""

    __slots__ = ("_blocks", "_done", "_passthrough", "_prompt", "_rename", "_tools")

    def __init__(self, passthrough: bool = False, rename: bytes | None = None) -> None:
        super().__init__(None if passthrough else TextChunks("delta.text"), passthrough)
        self._passthrough = passthrough
        self._rename = rename
        self._done = False
        self._prompt: int | None = None
        self._blocks: dict[int, str] = {}  # block index -> its type
        self._tools: dict[int, int] = {}  # a tool_use block's index -> its call index

    def feed(self, data: bytes) -> list[Event]:
        if self._passthrough:
            # A pass-through's content deltas (nearly all of a stream) go out undecoded.
            data = self.taken_back(data)
            run = self.relay_run(data, _TEXT_DELTAS)
            if run is not None:
                return run
        return super().feed(data)

    def on_event(self, data: bytes, out: list[Event]) -> None:
        # Each event's payload names its kind in `type`, as its `event:` line does.
        obj = jsonutil.loads(data)
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "error" or (kind is None and isinstance(obj, dict) and "error" in obj):
            err = obj.get("error")
            word = err.get("type") if isinstance(err, dict) else None
            raise UpstreamError(
                f"backend error mid-stream ({word}): {error_text(obj)}", upstream_class=UpstreamClass.MIDSTREAM
            )
        if self._passthrough:
            out.append(Frame(self.relayed(data, "model", self._rename if kind == "message_start" else None)))
        if kind == "content_block_delta":
            delta = obj["delta"]
            self._delta(obj["index"], delta, out)
            if delta["type"] == "text_delta" and type(delta["text"]) is str and not self._passthrough:
                self.teach(data, 0, delta["text"])
        elif kind == "content_block_start":
            self._start(obj["index"], obj["content_block"], out)
        elif kind == "message_start":
            usage = usage_from(obj["message"].get("usage"))
            if usage is not None and usage.prompt_tokens is not None:
                self._prompt = usage.prompt_tokens
                out.append(UsageEvent(Usage(usage.prompt_tokens, None, usage.extra)))
        elif kind == "message_delta":
            delta = obj.get("delta") or {}
            finish = FINISH_WORDS.read(delta.get("stop_reason"))
            if finish is not None:
                out.append(FinishEvent(finish, 0, _text_or_none(delta.get("stop_sequence"))))
            usage = usage_from(obj.get("usage"), self._prompt)
            if usage is not None:
                out.append(UsageEvent(usage))
        elif kind == "message_stop":
            self._done = True

    def on_end(self, out: list[Event]) -> None:
        if not self._done:
            raise UpstreamError("backend stream ended before it was complete", upstream_class=UpstreamClass.MIDSTREAM)

    def _start(self, index: int, block: dict[str, Any], out: list[Event]) -> None:
        kind = block["type"]
        self._blocks[index] = kind
        if kind == "tool_use":
            call = self._tools[index] = len(self._tools)
            out.append(ToolCallDelta(call, block.get("id"), block.get("name")))
            given = block.get("input")
            if given:  # a server that sends the input whole, with no deltas
                out.append(ToolCallDelta(call, arguments=jsonutil.dumps(given).decode()))
        elif kind == "text" and block.get("text"):
            out.append(TextDelta(block["text"]))
        elif kind == "thinking" and block.get("thinking"):
            out.append(ReasoningDelta(block["thinking"]))

    def _delta(self, index: int, delta: dict[str, Any], out: list[Event]) -> None:
        kind = delta["type"]
        if kind == "text_delta":
            if delta["text"]:
                out.append(TextDelta(delta["text"]))
        elif kind == "thinking_delta":
            if delta["thinking"]:
                out.append(ReasoningDelta(delta["thinking"]))
        elif kind == "input_json_delta":
            call = self._tools.get(index)
            if call is not None and delta["partial_json"]:
                out.append(ToolCallDelta(call, arguments=delta["partial_json"]))
