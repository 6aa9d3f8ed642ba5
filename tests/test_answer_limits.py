"""Backend answers read whole, and the bound on them (`limits.max_answer_bytes`): an answer or a
stream event past it is a clear error for the client and a cut connection for the backend, an
answer that arrives in pieces is read to its end, and one at the limit passes."""

import asyncio
import gzip
from typing import Any

import pytest
from aiohttp import web

from gateway import jsonutil
from tests.conftest import one_route
from tests.fixtures.openai.wire import load
from tests.support import FakeUpstream, Recorded, sse_json

LIMIT = 64 * 1024
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
STREAM = {**CHAT, "stream": True}


def limited(url: str, dialect: str = "openai") -> dict[str, Any]:
    return {**one_route(dialect, "openai", url, timeout_s=10), "limits": {"max_answer_bytes": LIMIT}}


def chat_answer(text: str) -> bytes:
    """A chat completion whose message is `text`."""
    answer = load("chat_response.json")
    answer["choices"][0]["message"]["content"] = text
    return jsonutil.dumps(answer)


def endless(head: bytes, piece: bytes, content_type: str, upstream: FakeUpstream) -> Any:
    """An answer that starts with `head` and then sends `piece` until the reader goes away."""

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": content_type})
        await resp.prepare(request)
        await resp.write(head)
        try:
            for _ in range(100_000):  # 6 GB: a reader that holds it all never answers
                await resp.write(piece)
        except (ConnectionError, asyncio.CancelledError):  # a write's drain on a lost connection
            upstream.disconnected.set()
            raise
        return resp

    return reply


def in_pieces(body: bytes, status: int = 200, content_type: str = "application/json", length: bool = True) -> Any:
    """`body` in two writes with a pause between, as a body larger than a segment arrives."""

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse(status=status, headers={"Content-Type": content_type})
        if length:
            resp.content_length = len(body)
        await resp.prepare(request)
        half = len(body) // 2
        await resp.write(body[:half])
        await asyncio.sleep(0.05)
        await resp.write(body[half:])
        await resp.write_eof()
        return resp

    return reply


async def test_an_endless_answer_is_502_and_the_backend_is_cut(upstream, make_gateway):
    head = b'{"id": "x", "choices": [{"message": {"content": "'
    upstream.reply = endless(head, b"a" * 65536, "application/json", upstream)
    gw = await make_gateway(limited(upstream.url))
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 502
    err = (await resp.json())["error"]
    assert err["type"] == "server_error" and "limits.max_answer_bytes" in err["message"], err
    await asyncio.wait_for(upstream.disconnected.wait(), 5)
    metrics = await (await gw.get("/metrics")).text()
    assert 'gateway_upstream_errors_total{backend="up",error="protocol",route="r"} 1.0' in metrics


async def test_an_answer_whose_length_is_past_the_limit_is_refused_unread(upstream, make_gateway):
    big = chat_answer("a" * LIMIT)
    upstream.reply = in_pieces(big)
    gw = await make_gateway(limited(upstream.url))
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 502 and "limits.max_answer_bytes" in (await resp.json())["error"]["message"]


async def test_a_compressed_answer_is_held_to_the_limit_once_decoded(upstream, make_gateway):
    # 64 MiB of text in well under 1 MiB of gzip: the Content-Length says nothing of its size.
    bomb = gzip.compress(chat_answer("a" * (64 * 1024 * 1024)), 9)
    assert len(bomb) < LIMIT * 2

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.Response(body=bomb, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})

    upstream.reply = reply
    gw = await make_gateway(limited(upstream.url))
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 502 and "limits.max_answer_bytes" in (await resp.json())["error"]["message"]
    # A small compressed answer is read as before.
    small = chat_answer("hello")

    async def fine(request: web.Request, rec: Recorded) -> web.StreamResponse:
        body = gzip.compress(small)
        return web.Response(body=body, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})

    upstream.reply = fine
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 200 and await resp.read() == small


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "chunked"])
async def test_an_answer_at_the_limit_passes_in_pieces(upstream, make_gateway, length):
    base = chat_answer("")
    exact = chat_answer("a" * (LIMIT - len(base)))
    assert len(exact) == LIMIT
    upstream.reply = in_pieces(exact, length=length)
    gw = await make_gateway(limited(upstream.url))
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 200
    assert await resp.read() == exact  # the same wire: the answer as it came, every byte of it


@pytest.mark.parametrize("dialect", ["openai", "tgi"])
async def test_an_endless_stream_event_ends_the_stream_in_band(upstream, make_gateway, dialect):
    # TGI's /generate_stream asks the backend for a completion, OpenAI's route for a chat.
    if dialect == "openai":
        kind, choice = "chat.completion.chunk", {"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}
    else:
        kind, choice = "text_completion", {"index": 0, "text": "Hi", "finish_reason": None}
    first = {"id": "c", "object": kind, "created": 1, "model": "m", "choices": [choice]}
    head = b"data: " + jsonutil.dumps(first) + b'\n\ndata: {"id":"c","choices":[{"text":"'
    upstream.reply = endless(head, b"a" * 65536, "text/event-stream", upstream)
    gw = await make_gateway(limited(upstream.url, dialect))
    if dialect == "openai":
        resp = await gw.post("/v1/chat/completions", json=STREAM)
        assert resp.status == 200
        events = sse_json(await resp.read())
        assert events[0]["choices"][0]["delta"]["content"] == "Hi"
        assert "limits.max_answer_bytes" in events[1]["error"]["message"]
        assert events[2:] == ["[DONE]"]
    else:
        resp = await gw.post("/generate_stream", json={"inputs": "hi"})
        assert resp.status == 200
        events = sse_json(await resp.read())
        assert events[0]["token"]["text"] == "Hi"
        assert "limits.max_answer_bytes" in events[-1]["error"]
    await asyncio.wait_for(upstream.disconnected.wait(), 5)


async def test_a_model_list_in_pieces_is_relayed_whole(upstream, make_gateway):
    listed = {
        "object": "list",
        "data": [{"id": f"model-{i:05d}", "object": "model", "owned_by": "x"} for i in range(3000)],
    }
    upstream.reply = in_pieces(jsonutil.dumps(listed))
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    got = await (await gw.get("/v1/models")).json()
    assert [m["id"] for m in got["data"]] == [m["id"] for m in listed["data"]]


async def test_a_backend_error_in_pieces_reaches_its_own_wire_whole(upstream, make_gateway):
    error = {"error": {"message": "bad " + "x" * 20000, "type": "invalid_request_error", "param": None, "code": None}}
    upstream.reply = in_pieces(jsonutil.dumps(error), status=400)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 400
    assert await resp.json() == error
