"""How a stream goes to the client: token by token while the backend writes it, whole (one head
and body, with its length) when the backend's answer had all come by its first read. The client
reads the same events either way, and a fault after them still ends the stream in-band."""

import re
from pathlib import Path

import pytest

from tests.conftest import one_route
from tests.support import raw_reply, sse_reply

FIXTURES = Path(__file__).parent / "fixtures"
CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def _frames(path: Path) -> list[bytes]:
    return [f + b"\n\n" for f in path.read_bytes().split(b"\n\n") if f.strip()]


@pytest.mark.parametrize(
    ("dialect", "backend", "fixture", "path", "body"),
    [
        ("openai", "openai", "openai/vllm_chat_stream.sse", "/v1/chat/completions", CHAT),
        ("openai", "tgi", "tgi/generate_stream.txt", "/v1/completions", {"model": "m", "prompt": "hi", "stream": True}),
        ("tgi", "openai", "openai/vllm_chat_stream.sse", "/generate_stream", {"inputs": "hi"}),
    ],
    ids=["pass-through", "openai-from-tgi", "tgi-from-openai"],
)
async def test_a_stream_that_came_whole_goes_whole_with_the_same_events(
    upstream, make_gateway, dialect, backend, fixture, path, body
):
    frames = _frames(FIXTURES / fixture)
    gw = await make_gateway(one_route(dialect, backend, upstream.url))

    upstream.reply = sse_reply(frames, delay=0.02)  # a token at a time
    paced = await gw.post(path, json=body)
    paced_body = await paced.read()
    assert paced.status == 200 and paced.headers.get("Transfer-Encoding") == "chunked"

    upstream.reply = raw_reply(b"".join(frames), content_type="text/event-stream")  # all in one read
    whole = await gw.post(path, json=body)
    whole_body = await whole.read()
    assert whole.status == 200
    assert whole.headers["Content-Type"].startswith("text/event-stream")
    assert int(whole.headers["Content-Length"]) == len(whole_body)
    assert "Transfer-Encoding" not in whole.headers

    def events(raw: bytes) -> list[bytes]:
        # The ids and times a translated stream makes up differ from one request to the next.
        return [re.sub(rb'"created":\d+', b"", e.split(b'"object"')[-1]) for e in raw.split(b"\n\n")]

    if dialect == backend:
        assert whole_body == paced_body
    else:
        assert len(whole_body.split(b"\n\n")) == len(paced_body.split(b"\n\n"))
        assert events(whole_body)[-3:] == events(paced_body)[-3:]


async def test_a_stream_cut_short_in_its_one_read_ends_with_an_in_band_error(upstream, make_gateway):
    frames = _frames(FIXTURES / "openai/vllm_chat_stream.sse")
    cut = b"".join(frames[:3])  # no finish, no [DONE]: the backend's answer ended early
    upstream.reply = raw_reply(cut, content_type="text/event-stream")
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    got = await resp.read()
    assert resp.status == 200
    assert got.startswith(b"".join(frames[:3]).split(b"\n\n")[0])
    assert b'"error"' in got and got.endswith(b"data: [DONE]\n\n")
