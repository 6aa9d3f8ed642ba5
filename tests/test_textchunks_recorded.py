"""Every real server's recorded stream in tests/fixtures reads from its text template exactly as it
reads event by event: the same events and the same faults, however the reads are cut; and the
template is learned from the server's own bytes (its field order, its extra fields, its framing),
so the fast path is the one each server's streams take.

Besides the recordings as they are, each is read lengthened: its text events repeated with other
texts (quotes, escapes, non-ASCII, line breaks), as a long answer of that server would come.
`triton/minimal_stream.txt`, `triton/trtllm_live_stream.txt` and `openai/vllm_*_stream.sse` were
recorded from the real-server tier's Triton and vLLM (tests/real).
"""

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway import jsonutil
from gateway.codec.parsing import EventParser
from gateway.codec.skeleton import units
from gateway.dialects.anthropic.reading import MessagesStreamParser
from gateway.dialects.databricks.reading import DatabricksStreamParser
from gateway.dialects.mindie.outbound import FINISH_WORDS as MINDIE_WORDS
from gateway.dialects.openai.reading import OpenAIStreamParser
from gateway.dialects.responses.reading import ResponsesStreamParser
from gateway.dialects.tgi.reading import GenerateStreamParser
from gateway.dialects.triton.families import MINDIE_READING, TRTLLM_READING, VLLM_READING
from gateway.dialects.triton.reading import CallState, TritonStreamParser
from tests.test_textchunks import TEXTS, event_cuts, read_all

FIX = Path(__file__).parent / "fixtures"


def triton(reading: Any) -> Callable[[], EventParser]:
    return lambda: TritonStreamParser(CallState(reading, "prompt", 100))


# Each recorded stream, and the parser that reads that server's streams.
STREAMS: dict[str, Callable[[], EventParser]] = {
    "openai/chat_stream.sse": lambda: OpenAIStreamParser(chat=True),
    "openai/chat_stream_tool_calls.sse": lambda: OpenAIStreamParser(chat=True),
    "openai/chat_stream_error.sse": lambda: OpenAIStreamParser(chat=True),
    "openai/completion_stream.sse": lambda: OpenAIStreamParser(chat=False),
    "openai/vllm_chat_stream.sse": lambda: OpenAIStreamParser(chat=True),
    "openai/vllm_completion_stream.sse": lambda: OpenAIStreamParser(chat=False),
    "databricks/chat_stream.txt": lambda: DatabricksStreamParser(chat=True),
    "databricks/completion_stream.txt": lambda: DatabricksStreamParser(chat=False),
    "mindie/chat_stream.txt": lambda: OpenAIStreamParser(chat=True, words=MINDIE_WORDS),
    "mindie/chat_stream_full_text.txt": lambda: OpenAIStreamParser(chat=True, words=MINDIE_WORDS),
    "mindie/infer_token_stream.txt": lambda: GenerateStreamParser(7, MINDIE_WORDS),
    "tgi/generate_stream.txt": lambda: GenerateStreamParser(),
    "tgi/stream_error.txt": lambda: GenerateStreamParser(),
    "triton/minimal_stream.txt": triton(TRTLLM_READING),
    "triton/trtllm_stream.txt": triton(TRTLLM_READING),
    "triton/trtllm_live_stream.txt": triton(TRTLLM_READING),
    "triton/vllm_stream.txt": triton(VLLM_READING),
    "triton/mindie_stream.txt": triton(MINDIE_READING),
    "triton/mindie_timeout_stream.txt": triton(MINDIE_READING),
    "triton/midstream_error_stream.txt": triton(TRTLLM_READING),
    "anthropic/sdk_basic_stream.sse": MessagesStreamParser,
    "anthropic/sdk_tool_use_stream.sse": MessagesStreamParser,
    "anthropic/sdk_thinking_stream.sse": MessagesStreamParser,
    "anthropic/vllm_max_tokens_stream.sse": MessagesStreamParser,
    "responses/vllm_stream.txt": ResponsesStreamParser,
    "responses/openapi_stream.txt": ResponsesStreamParser,
}
# The servers' text events the template must read, lengthened (the others have too few text
# events of one shape, or none).
TEMPLATED = {
    "openai/chat_stream.sse",
    "openai/completion_stream.sse",
    "openai/vllm_chat_stream.sse",
    "openai/vllm_completion_stream.sse",
    "databricks/chat_stream.txt",
    "mindie/chat_stream.txt",
    "mindie/infer_token_stream.txt",
    "tgi/generate_stream.txt",
    "triton/minimal_stream.txt",
    "triton/trtllm_stream.txt",
    "triton/trtllm_live_stream.txt",
    "triton/vllm_stream.txt",
    "triton/mindie_stream.txt",
    "anthropic/sdk_basic_stream.sse",
    "anthropic/vllm_max_tokens_stream.sse",
    "responses/vllm_stream.txt",
}


def general(factory: Callable[[], EventParser]) -> EventParser:
    parser = factory()
    parser._chunks = None  # every event read whole: the reference
    return parser


def _at(obj: Any, path: str) -> Any:
    for key in path.split("."):
        while isinstance(obj, list) and obj:
            obj = obj[0]
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def lengthened(data: bytes, path: str, rng: random.Random) -> bytes:
    """`data` with each text event followed by copies of it holding other texts."""
    out: list[bytes] = []
    for block in data.split(b"\n\n"):
        out.append(block)
        line = next((ln for ln in block.split(b"\n") if ln.startswith(b"data:")), None)
        if line is None:
            continue
        payload = line[5:].lstrip(b" ")
        try:
            text = _at(jsonutil.loads(payload), path)
        except jsonutil.JSONDecodeError:
            continue
        found = [u for u in units(payload) or () if u.path == path]
        if not isinstance(text, str) or not text or len(found) != 1:
            continue
        u = found[0]
        for _ in range(6):
            other = payload[: u.start] + jsonutil.dumps(rng.choice(TEXTS)) + payload[u.end :]
            out.append(block.replace(payload, other))
    return b"\n\n".join(out)


def agree(factory: Callable[[], EventParser], data: bytes, seed: int) -> EventParser:
    """Read through the template with random cuts (and an event a read) as read whole; the
    template's parser of the whole read is returned."""
    rng = random.Random(seed)
    expected = read_all(general(factory), data, [])  # type: ignore[arg-type]
    for n in range(20):
        cuts = event_cuts(data) if n == 0 else sorted(rng.sample(range(1, len(data)), k=rng.randint(0, 5)))
        assert read_all(factory(), data, cuts) == expected, cuts  # type: ignore[arg-type]
    parser = factory()
    assert read_all(parser, data, []) == expected  # type: ignore[arg-type]
    return parser


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_recorded_stream_reads_from_its_template_as_it_reads_whole(name: str) -> None:
    factory = STREAMS[name]
    data = (FIX / name).read_bytes()
    agree(factory, data, seed=1)
    chunks = factory()._chunks
    assert chunks is not None
    long = lengthened(data, chunks._text, random.Random(name))
    parser = agree(factory, long, seed=2)
    assert parser._chunks is not None
    if name in TEMPLATED:
        assert parser._chunks.read > 0, "the server's text events were not read from their template"


def test_a_servers_next_stream_takes_its_template_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """A template learned from one stream is kept (gateway.codec.learning `_KEPT`): the same
    server's next stream, whose first text event fits it, reads from it without learning anew
    (no payload is cut at its values), and reads what the full reading reads. Streams of every
    server, read in turn and mixed (servers of one parser kind write different shapes), each
    read as the full reading reads them."""
    import gateway.codec.learning as learning

    rng = random.Random(31)
    streams = []
    for name in sorted(TEMPLATED):
        data = (FIX / name).read_bytes()
        text = STREAMS[name]()._chunks._text  # type: ignore[union-attr]
        streams.append((name, lengthened(data, text, rng)))
    learned: list[str] = []
    monkeypatch.setattr(learning, "units", lambda payload: learned.append("cut") or units(payload))
    for rounds in range(3):
        order = streams[:] if rounds == 0 else rng.sample(streams, len(streams))
        for name, data in order:
            factory = STREAMS[name]
            expected = read_all(general(factory), data, [])  # type: ignore[arg-type]
            for cuts in ([], event_cuts(data)):
                learned.clear()
                parser = factory()
                assert read_all(parser, data, cuts) == expected, name  # type: ignore[arg-type]
                assert parser._chunks is not None and parser._chunks.read > 0, name
                if cuts:  # the second stream of this server in a row
                    assert not learned, f"{name}: the template was learned anew"
