"""Answers in the shapes real servers send, made from their recordings in tests/fixtures.

Each recorded stream is lengthened to the benchmark's STREAM_EVENTS events the way a longer
answer of that server comes: the events before its first text event as they are, its first text
event repeated with the stub's words for texts (and its counters counted on: a sequence number,
a token's position), then its events from the last text event that says more than a text (a
finish with the last piece, usage, the end). The whole answers are the recordings' own, compact.
What a client should get is read from the stream by the gateway's full reading of that server
(no template), the reference the fast path is proved against.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.stub import STREAM_EVENTS, Answer, stream_tokens
from gateway import jsonutil
from gateway.codec.parsing import EventParser
from gateway.codec.skeleton import units
from gateway.dialects.anthropic.reading import MessagesStreamParser
from gateway.dialects.databricks.reading import DatabricksStreamParser
from gateway.dialects.openai.reading import OpenAIStreamParser
from gateway.dialects.responses.reading import ResponsesStreamParser
from gateway.dialects.tgi.reading import GenerateStreamParser
from gateway.dialects.triton.families import MINDIE_READING, TRTLLM_READING, VLLM_READING
from gateway.dialects.triton.reading import CallState, TritonStreamParser
from gateway.neutral.events import TextDelta, expand

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


@dataclass(frozen=True)
class Recording:
    """One server's recorded stream and whole answer, where its backend is called, and how it is read."""

    name: str
    stream_file: str
    whole_file: str
    text: str  # the path of a text event's text (gateway.codec.skeleton)
    whole_text: str  # the path of the whole answer's text
    path: str
    stream_path: str
    parser: Callable[[], EventParser]
    counters: tuple[str, ...] = ()  # the fields the server steps from one text event to the next


def _triton(reading: Any) -> Callable[[], EventParser]:
    return lambda: TritonStreamParser(CallState(reading, "prompt", None))


CHAT, GEN, GEN_STREAM = "/v1/chat/completions", "/v2/models/bench/generate", "/v2/models/bench/generate_stream"
RECORDINGS = [
    Recording(
        "vllm chat",
        "openai/vllm_chat_stream.sse",
        "openai/chat_response.json",
        "choices.delta.content",
        "choices.message.content",
        CHAT,
        CHAT,
        lambda: OpenAIStreamParser(chat=True),
    ),
    Recording(
        "databricks chat",
        "databricks/chat_stream.txt",
        "databricks/chat_response.json",
        "choices.delta.content",
        "choices.message.content",
        "/serving-endpoints/bench/invocations",
        "/serving-endpoints/bench/invocations",
        lambda: DatabricksStreamParser(chat=True),
    ),
    Recording(
        "mindie native",
        "mindie/infer_token_stream.txt",
        "mindie/infer_token_response.json",
        "token.text",
        "generated_text",
        "/infer",
        "/infer",
        lambda: GenerateStreamParser(7),
    ),
    Recording(
        "tgi",
        "tgi/generate_stream.txt",
        "tgi/generate_response.json",
        "token.text",
        "generated_text",
        "/generate",
        "/generate_stream",
        GenerateStreamParser,
        ("index",),
    ),
    Recording(
        "triton minimal",
        "triton/minimal_stream.txt",
        "triton/generate_response.json",
        "text_output",
        "text_output",
        GEN,
        GEN_STREAM,
        _triton(TRTLLM_READING),
    ),
    Recording(
        "triton trtllm",
        "triton/trtllm_live_stream.txt",
        "triton/trtllm_live_response.json",
        "text_output",
        "text_output",
        GEN,
        GEN_STREAM,
        _triton(TRTLLM_READING),
    ),
    Recording(
        "triton vllm",
        "triton/vllm_stream.txt",
        "triton/vllm_response.json",
        "text_output",
        "text_output",
        GEN,
        GEN_STREAM,
        _triton(VLLM_READING),
    ),
    Recording(
        "triton mindie",
        "triton/mindie_stream.txt",
        "triton/mindie_response.json",
        "text_output",
        "text_output",
        GEN,
        GEN_STREAM,
        _triton(MINDIE_READING),
    ),
    Recording(
        "anthropic",
        "anthropic/vllm_max_tokens_stream.sse",
        "anthropic/vllm_max_tokens.json",
        "delta.text",
        "content.text",
        "/v1/messages",
        "/v1/messages",
        MessagesStreamParser,
    ),
    Recording(
        "responses",
        "responses/vllm_stream.txt",
        "responses/vllm_response.json",
        "delta",
        "output.content.text",
        "/v1/responses",
        "/v1/responses",
        ResponsesStreamParser,
        ("sequence_number",),
    ),
]


def at_path(obj: Any, path: str) -> Any:
    """The value under a dotted path, taking the first item of each list on the way."""
    for key in path.split("."):
        while isinstance(obj, list) and obj:
            obj = obj[0]
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _payload(block: bytes) -> bytes | None:
    line = next((ln for ln in block.split(b"\n") if ln.startswith(b"data:")), None)
    return None if line is None else line[5:].lstrip(b" ")


def _text_of(block: bytes, path: str) -> str | None:
    payload = _payload(block)
    try:
        text = at_path(jsonutil.loads(payload), path) if payload else None
    except jsonutil.JSONDecodeError:
        return None
    return text if isinstance(text, str) and text else None


def _with(block: bytes, path: str, value: bytes) -> bytes:
    """`block` with the value under `path` (one place) replaced by `value` (JSON bytes)."""
    payload = _payload(block)
    assert payload is not None
    found = [u for u in units(payload) or () if u.path == path]
    if len(found) != 1:
        return block
    u = found[0]
    return block.replace(payload, payload[: u.start] + value + payload[u.end :])


def lengthen(data: bytes, path: str, steps: tuple[str, ...] = (), events: int = STREAM_EVENTS) -> bytes:
    """The recorded stream as `events` events (see the module's docstring)."""
    blocks = [b for b in data.split(b"\n\n") if b.strip()]
    texts = [n for n, b in enumerate(blocks) if _text_of(b, path) is not None]
    first, last = texts[0], texts[-1]
    payload = _payload(blocks[first]) or b""
    # The last text event closes the stream when it says more than the first does.
    says_more = _with(blocks[last], path, b'""') != _with(blocks[first], path, b'""')
    tail = blocks[last:] if says_more else blocks[last + 1 :]
    head = blocks[:first]
    token = blocks[first]
    counters = {}
    for name in steps:
        found = [u for u in units(payload) or () if u.path == name]
        if found and payload[found[0].start : found[0].end].isdigit():
            counters[name] = int(payload[found[0].start : found[0].end])
    n = max(1, events - len(head) - len(tail))
    made = []
    for k, word in enumerate(stream_tokens(n)):
        block = _with(token, path, jsonutil.dumps(word))
        for name, start in counters.items():
            block = _with(block, name, b"%d" % (start + k))
        made.append(block)
    shift = n - 1
    fixed_tail = []
    for block in tail:
        for name, start in counters.items():
            value = at_path(jsonutil.loads(_payload(block) or b"{}"), name) if _payload(block) else None
            if isinstance(value, int) and not isinstance(value, bool) and value >= start:
                block = _with(block, name, b"%d" % (value + shift))
        fixed_tail.append(block)
    return b"".join(b + b"\n\n" for b in [*head, *made, *fixed_tail])


def read_text(parser: EventParser, data: bytes) -> str:
    """What the server's stream says, read by the full reading (no template)."""
    parser._chunks = None
    events = expand(parser.feed(data) + parser.close())
    return "".join(e.text for e in events if type(e) is TextDelta)


def answer(rec: Recording) -> Answer:
    stream = lengthen((FIXTURES / rec.stream_file).read_bytes(), rec.text, rec.counters)
    whole_obj = json.loads((FIXTURES / rec.whole_file).read_bytes())
    whole = json.dumps(whole_obj, separators=(",", ":"), ensure_ascii=False).encode()
    text = at_path(whole_obj, rec.whole_text)
    base = "/rec/" + rec.name.replace(" ", "-")
    return Answer(rec.name, rec.path, rec.stream_path, whole, stream, text, read_text(rec.parser(), stream), base)


def answers() -> dict[str, Answer]:
    return {rec.name: answer(rec) for rec in RECORDINGS}
