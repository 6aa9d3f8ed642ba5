"""Backend faults after the first byte, and client disconnects, as MindIE, TGI, Triton and
Databricks streaming clients see them: every token the backend sent, then the dialect's in-band
error form and its terminator (or close), never a hang, and the gateway keeps serving.

In-band forms: TGI `data:{"error","error_type"}`, Triton `data: {"error"}`, MindIE (native and
OpenAI-flavoured) a raw text line and no `[DONE]`, Databricks its error body with an `error`
object, then `data: [DONE]`.
"""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway import jsonutil
from gateway.app import create_app
from gateway.config import parse_config
from tests.conftest import one_route
from tests.support import Recorded, sse_parse, sse_reply
from tests.test_faults_dialects import STREAM_ROUTES, WAIT, R, config, expect_error, frames, post, still_serves

FIX = Path(__file__).parent / "fixtures"
SIDS = [r.id for r in STREAM_ROUTES]
# Frames sent before the fault, and the text they carry.
BEFORE = {"completion": 2, "chat": 3}
TEXTS = {"completion": ["This", " is a test"], "chat": ["Hello", ", wörld 👋"]}


def client_stream(r: R, body: bytes, code: str = "INTERNAL_ERROR") -> tuple[list[str], str | None]:
    """The texts a streaming client got and the in-band error message (None if none), checking
    the dialect's framing: nothing but the terminator after an error."""
    events, stray = sse_parse(body)
    texts: list[str] = []
    error: str | None = None
    if r.dialect == "mindie":
        assert b"[DONE]" not in body
        assert len(stray) <= 1 and (not stray or body.endswith(stray[0].encode() + b"\n"))
        error = stray[0] if stray else None
        for p in events:
            obj = jsonutil.loads(p)
            if "choices" in obj:
                texts += [c["delta"]["content"] for c in obj["choices"] if c["delta"].get("content")]
            else:
                assert obj.get("generated_text") is None
                texts += [obj["token"]["text"]] if obj["token"]["text"] else []
        return texts, error
    assert stray == []
    if r.dialect == "databricks":
        assert events[-1] == b"[DONE]"
        events = events[:-1]
    for i, p in enumerate(events):
        obj = jsonutil.loads(p)
        if r.dialect == "tgi" and "error" in obj:
            assert i == len(events) - 1 and body.endswith(b"data:" + p + b"\n\n")
            assert obj == {"error": obj["error"], "error_type": "incomplete_generation_stream"}
            error = obj["error"]
        elif r.dialect == "tgi":
            assert obj["generated_text"] is None
            texts.append(obj["token"]["text"])
        elif r.dialect == "triton" and "error" in obj:
            assert i == len(events) - 1 and set(obj) == {"error"}
            error = obj["error"]
        elif r.dialect == "triton":
            texts.append(obj["text_output"])
        elif "error_code" in obj:
            assert i == len(events) - 1
            assert obj == {"error_code": code, "message": obj["message"], "error": obj["error"]}
            assert obj["error"] == {"error_code": code, "message": obj["message"]}
            error = obj["message"]
        else:
            texts += [c["delta"]["content"] for c in obj["choices"] if c["delta"].get("content")]
    return texts, error


async def broken_server(head: bytes, chunks: list[bytes]) -> tuple[asyncio.AbstractServer, str]:
    """A raw HTTP server that sends a chunked response and then resets the connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        writer.write(head)
        for c in chunks:
            writer.write(b"%x\r\n%b\r\n" % (len(c), c))
            await writer.drain()
        writer.transport.abort()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.fixture
async def resetting() -> AsyncIterator[Any]:
    servers: list[asyncio.AbstractServer] = []

    async def start(chunks: list[bytes]) -> str:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        server, url = await broken_server(head, chunks)
        servers.append(server)
        return url

    yield start
    for s in servers:
        s.close()
        await s.wait_closed()


@pytest.mark.parametrize("r", STREAM_ROUTES, ids=SIDS)
async def test_reset_mid_stream(resetting, make_gateway, r):
    url = await resetting(frames(f"{r.task}_stream.sse")[: BEFORE[r.task]])
    gw = await make_gateway(config(r, url))
    resp, body = await post(gw, r.path, json=r.body)
    assert resp.status == 200
    assert client_stream(r, body) == (TEXTS[r.task], "backend 'up' closed the connection in the middle of its answer")
    metrics = await (await gw.get("/metrics")).text()
    assert 'gateway_upstream_errors_total{backend="up",error="midstream",route="r"} 1.0' in metrics


ERROR_EVENT = b'data: {"error":{"message":"engine died","type":"server_error","param":null,"code":null}}\n\n'
MID_FAULTS = {
    "error-event": ([ERROR_EVENT], "backend error mid-stream: engine died"),
    # Control characters in a backend's text reach the client as spaces (ANSI escapes, NULs).
    "garbage": ([b"\xff\xfe\x00 garbage\n\n"], "backend broke off the stream: \ufffd\ufffd  garbage"),
    "raw-text-line": ([b"Internal error: worker died\n"], "backend broke off the stream: Internal error: worker died"),
    "no-terminator": ([], "backend stream ended before it was complete"),
}


@pytest.mark.parametrize("fault", sorted(MID_FAULTS))
@pytest.mark.parametrize("r", STREAM_ROUTES, ids=SIDS)
async def test_fault_mid_stream(upstream, make_gateway, r, fault):
    tail, message = MID_FAULTS[fault]
    upstream.reply = sse_reply(frames(f"{r.task}_stream.sse")[: BEFORE[r.task]] + tail)
    gw = await make_gateway(config(r, upstream.url))
    resp, body = await post(gw, r.path, json=r.body)
    assert resp.status == 200
    assert client_stream(r, body) == (TEXTS[r.task], message)
    await still_serves(gw, upstream, r)


def quiet_after(chunks: list[bytes]) -> Any:
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_type = "text/event-stream"
        await resp.prepare(request)
        for c in chunks:
            await resp.write(c)
        await asyncio.sleep(5)
        return resp

    return reply


@pytest.mark.parametrize("r", STREAM_ROUTES, ids=SIDS)
async def test_stall_mid_stream(upstream, make_gateway, r):
    upstream.reply = quiet_after(frames(f"{r.task}_stream.sse")[: BEFORE[r.task]])
    gw = await make_gateway(config(r, upstream.url, timeout_s=0.3))
    resp, body = await post(gw, r.path, json=r.body)
    assert resp.status == 200
    expected = (TEXTS[r.task], "backend 'up' sent nothing for 0.3s")
    assert client_stream(r, body, code="DEADLINE_EXCEEDED") == expected
    await still_serves(gw, upstream, r)


@pytest.mark.parametrize("fault", ["error-event", "reset"])
@pytest.mark.parametrize("r", STREAM_ROUTES, ids=SIDS)
async def test_fault_before_first_event_gets_a_status(upstream, resetting, make_gateway, r, fault):
    """Nothing was written yet, so the client gets a real error status, not a 200 stream."""
    if fault == "reset":
        gw = await make_gateway(config(r, await resetting([])))
        assert (
            await expect_error(gw, r, "malformed") == "backend 'up' closed the connection in the middle of its answer"
        )
        return
    upstream.reply = sse_reply([ERROR_EVENT])
    gw = await make_gateway(config(r, upstream.url))
    assert await expect_error(gw, r, "malformed") == "backend error mid-stream: engine died"
    await still_serves(gw, upstream, r)


def fixture_frames(path: str) -> list[bytes]:
    return [f + b"\n\n" for f in (FIX / path).read_bytes().split(b"\n\n") if f.strip()]


DBX_ERROR = b'data: {"error_code": "INTERNAL_ERROR", "message": "replica crashed"}\n\n'
CHAT = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
# Inbound dialect in front of a backend of another (or its own) dialect whose stream breaks in
# that backend's own way: (route, backend dialect, frames, texts, in-band message).
CROSS = [
    (
        R("tgi<-tgi", "tgi", "/generate_stream", {"inputs": "hi"}, "completion", True),
        "tgi",
        fixture_frames("tgi/generate_stream.txt")[:3] + fixture_frames("tgi/stream_error.txt"),
        [" am", " a"],
        "backend error mid-stream: Input validation error: `top_p` must be > 0.0 and < 1.0",
    ),
    (
        R("tgi<-mindie", "tgi", "/generate_stream", {"inputs": "hi"}, "completion", True),
        "mindie",
        [*fixture_frames("mindie/infer_token_stream.txt")[:2], b"Engine callback timeout: client timeout"],
        ["am", " a"],
        "backend broke off the stream: Engine callback timeout: client timeout",
    ),
    (
        R("triton<-tgi", "triton", "/v2/models/m/generate_stream", {"text_input": "hi"}, "completion", True),
        "tgi",
        fixture_frames("tgi/generate_stream.txt")[:3],
        [" am", " a"],
        "backend stream ended before its final event",
    ),
    (
        R("mindie-chat<-mindie", "mindie", "/mi/v1/chat/completions", {**CHAT, "model": "m"}, "chat", True, "/mi"),
        "mindie",
        [*fixture_frames("mindie/chat_stream.txt")[:2], b"Failed to get engine response\n"],
        None,
        "backend broke off the stream: Failed to get engine response",
    ),
    (
        R("dbx<-dbx", "databricks", "/serving-endpoints/m/invocations", CHAT, "chat", True),
        "databricks",
        [*fixture_frames("databricks/chat_stream.txt")[:2], DBX_ERROR],
        ["Hallo", " Welt"],
        "backend error mid-stream: INTERNAL_ERROR: replica crashed",
    ),
]


@pytest.mark.parametrize(("r", "backend", "chunks", "texts", "message"), CROSS, ids=[c[0].id for c in CROSS])
async def test_fault_mid_stream_other_backends(upstream, make_gateway, r, backend, chunks, texts, message):
    upstream.reply = sse_reply(chunks)
    cfg = one_route(r.dialect, backend, upstream.url, model="m")
    if r.prefix:
        cfg["routes"][0]["prefix"] = r.prefix
    gw = await make_gateway(cfg)
    resp, body = await post(gw, r.path, json=r.body)
    assert resp.status == 200
    got_texts, got_error = client_stream(r, body)
    assert got_error == message
    if texts is not None:
        assert got_texts == texts
    else:
        assert got_texts


@pytest.mark.parametrize("r", STREAM_ROUTES, ids=SIDS)
async def test_client_disconnect_reaches_upstream(upstream, aiohttp_client, r):
    upstream.reply = sse_reply(frames(f"{r.task}_stream.sse")[: BEFORE[r.task]], hang=True, upstream=upstream)
    app = create_app(parse_config(config(r, upstream.url)))
    gw = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
    resp = await asyncio.wait_for(gw.post(r.path, json=r.body), WAIT)
    assert resp.status == 200
    first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), WAIT)
    assert first.startswith(b"data:")
    resp.close()
    await asyncio.wait_for(upstream.disconnected.wait(), WAIT)
    await still_serves(gw, upstream, r)
