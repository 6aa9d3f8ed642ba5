"""Backend faults seen by an OpenAI client: refused, timed out, malformed, error statuses, broken
and unfinished streams, in-band errors, client disconnects and replica failover."""

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from gateway import jsonutil
from gateway.app import create_app
from gateway.config import parse_config
from tests.conftest import one_route
from tests.fixtures.openai.wire import raw
from tests.support import Recorded, json_reply, raw_reply, sse_json, sse_reply

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
STREAM = {**CHAT, "stream": True}


def frames(name: str) -> list[bytes]:
    return [f + b"\n\n" for f in raw(name).split(b"\n\n") if f]


def unasked(frame: bytes) -> bytes:
    """A chunk of OpenAI's as a client that asked for no usage gets it: the gateway asks on its
    own behalf, and the null usage field that adds to every chunk does not go out."""
    return frame.replace(b',"usage":null', b"")


def closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


async def error_of(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status == status
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.headers.get("X-Request-Id")
    body = await resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]  # type: ignore[no-any-return]


async def test_connection_refused_is_502(make_gateway):
    gw = await make_gateway(one_route("openai", "openai", closed_port_url()))
    for body in (CHAT, STREAM):
        err = await error_of(await gw.post("/v1/chat/completions", json=body), 502)
        assert err["type"] == "server_error"
        assert "unreachable" in err["message"]
    metrics = await (await gw.get("/metrics")).text()
    assert 'gateway_upstream_errors_total{backend="up",error="connect",route="r"} 2.0' in metrics


def slow(seconds: float) -> Any:
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return web.json_response({})

    return reply


async def test_timeout_is_504(upstream, make_gateway):
    upstream.reply = slow(5)
    gw = await make_gateway(one_route("openai", "openai", upstream.url, timeout_s=0.2))
    for body in (CHAT, STREAM):
        err = await error_of(await gw.post("/v1/chat/completions", json=body), 504)
        assert err["type"] == "server_error"


async def test_stream_stalls_mid_way_is_in_band_error(upstream, make_gateway):
    gw = await make_gateway(one_route("openai", "openai", upstream.url, timeout_s=0.3))
    upstream.reply = quiet_after(frames("chat_stream.sse")[:2])
    resp = await gw.post("/v1/chat/completions", json=STREAM)
    assert resp.status == 200
    events = sse_json(await resp.read())
    assert events[:2] == [jsonutil.loads(unasked(f)[6:]) for f in frames("chat_stream.sse")[:2]]
    assert events[2]["error"]["type"] == "server_error"
    assert events[3:] == ["[DONE]"]


def quiet_after(fs: list[bytes]) -> Any:
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_type = "text/event-stream"
        await resp.prepare(request)
        for f in fs:
            await resp.write(f)
        await asyncio.sleep(5)
        return resp

    return reply


async def test_non_json_200_is_502(upstream, make_gateway):
    upstream.reply = raw_reply(b"<html>hello</html>", content_type="text/html")
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    err = await error_of(await gw.post("/v1/chat/completions", json=CHAT), 502)
    assert err["message"] == "backend 'up' sent a malformed response"
    upstream.reply = raw_reply(b"[1, 2]")
    await error_of(await gw.post("/v1/completions", json={"model": "m", "prompt": "p"}), 502)


@pytest.mark.parametrize(
    ("headers", "what"),
    [
        ({"X-Big": "a" * 20000}, "a header line longer than 8190 bytes"),
        ({f"X-H{i}": "v" for i in range(200)}, "more than 100 header lines"),
    ],
    ids=["long", "many"],
)
async def test_an_answer_head_that_cannot_be_read_is_a_protocol_502(upstream, make_gateway, headers, what):
    upstream.reply = json_reply({"x": 1}, headers=headers)
    gw = await make_gateway(one_route("openai", "openai", upstream.url, retries=2))
    err = await error_of(await gw.post("/v1/chat/completions", json=CHAT), 502)
    assert err["message"] == f"backend 'up' sent {what}"
    assert len(upstream.requests) == 1  # it had the request: not sent again
    metrics = await (await gw.get("/metrics")).text()
    assert 'gateway_upstream_errors_total{backend="up",error="protocol",route="r"} 1.0' in metrics


@pytest.mark.parametrize(
    ("status", "fixture", "etype"),
    [
        (400, "error_invalid_request.json", "invalid_request_error"),
        (404, "error_model_not_found.json", "invalid_request_error"),
        (429, "error_rate_limit.json", "rate_limit_exceeded"),
        (500, "error_server.json", "server_error"),
        (503, "error_server.json", "server_error"),
    ],
)
async def test_upstream_error_status_mapped(upstream, make_gateway, status, fixture, etype):
    """A backend of the client's own wire: its error body reaches the client as it is (type,
    code and param included), with its status. A translated route says it in its own words."""
    same = await make_gateway(one_route("openai", "openai", upstream.url))
    other = await make_gateway(one_route("openai", "databricks", upstream.url, model="m"))
    upstream_message = jsonutil.loads(raw(fixture))["error"]["message"]
    for body in (CHAT, STREAM):
        upstream.reply = raw_reply(raw(fixture), status=status)
        resp = await same.post("/v1/chat/completions", json=body)
        assert resp.status == status and await resp.read() == raw(fixture)
        if status == 404:
            continue  # a translated route names the endpoint itself: see the configured-model test
        err = await error_of(await other.post("/v1/chat/completions", json=body), status)
        assert err["type"] == etype
        assert err["message"] == f"backend 'up' answered {status}: {upstream_message}"
        upstream.reply = raw_reply(b"upstream exploded\n", status=status, content_type="text/plain")
        err = await error_of(await other.post("/v1/chat/completions", json=body), status)
        assert err["message"] == f"backend 'up' answered {status}: upstream exploded"


async def test_upstream_auth_failure_is_operator_problem(upstream, make_gateway):
    upstream.reply = json_reply({"error": {"message": "Incorrect API key"}}, status=401)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    err = await error_of(await gw.post("/v1/chat/completions", json=CHAT), 502)
    assert "Incorrect API key" in err["message"]


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
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


@pytest.fixture
async def reset_upstream() -> AsyncIterator[str]:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    server, url = await broken_server(head, frames("chat_stream.sse")[:3])
    yield url
    server.close()
    await server.wait_closed()


async def test_reset_mid_stream_gives_in_band_error_then_done(reset_upstream, make_gateway):
    gw = await make_gateway(one_route("openai", "openai", reset_upstream))
    resp = await gw.post("/v1/chat/completions", json=STREAM)
    assert resp.status == 200
    events = sse_json(await resp.read())
    assert events[:3] == [jsonutil.loads(unasked(f)[6:]) for f in frames("chat_stream.sse")[:3]]
    assert events[3] == {
        "error": {
            "message": "backend 'up' closed the connection in the middle of its answer",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    assert events[4:] == ["[DONE]"]
    metrics = await (await gw.get("/metrics")).text()
    assert 'gateway_upstream_errors_total{backend="up",error="midstream",route="r"} 1.0' in metrics


async def test_reset_before_any_event_is_502(make_gateway):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    server, url = await broken_server(head, [])
    try:
        gw = await make_gateway(one_route("openai", "openai", url))
        err = await error_of(await gw.post("/v1/chat/completions", json=STREAM), 502)
        assert err["message"] == "backend 'up' closed the connection in the middle of its answer"
    finally:
        server.close()
        await server.wait_closed()


async def test_in_band_upstream_error_event(upstream, make_gateway):
    upstream.reply = sse_reply(frames("chat_stream_error.sse"))
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    resp = await gw.post("/v1/chat/completions", json=STREAM)
    assert resp.status == 200
    events = sse_json(await resp.read())
    assert events[:2] == [jsonutil.loads(f[6:]) for f in frames("chat_stream_error.sse")[:2]]
    assert events[2] == {
        "error": {
            "message": "backend error mid-stream: The server had an error while processing your request.",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    assert events[3:] == ["[DONE]"]


async def test_error_event_first_gets_a_real_status(upstream, make_gateway):
    upstream.reply = sse_reply([b'data: {"error": {"message": "overloaded"}}\n\n'])
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    err = await error_of(await gw.post("/v1/chat/completions", json=STREAM), 502)
    assert "overloaded" in err["message"]


async def test_stream_ending_without_done_or_finish(upstream, make_gateway):
    upstream.reply = sse_reply(frames("chat_stream.sse")[:3])
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    resp = await gw.post("/v1/chat/completions", json=STREAM)
    assert resp.status == 200
    events = sse_json(await resp.read())
    assert len(events) == 5
    assert events[3]["error"]["message"] == "backend stream ended before it was complete"
    assert events[4] == "[DONE]"


async def test_stream_with_finish_but_no_done_completes(upstream, make_gateway):
    upstream.reply = sse_reply(frames("chat_stream.sse")[:5])
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    resp = await gw.post("/v1/chat/completions", json=STREAM)
    assert await resp.read() == b"".join(map(unasked, frames("chat_stream.sse")[:5])) + b"data: [DONE]\n\n"


async def test_raw_text_line_mid_stream(upstream, make_gateway):
    upstream.reply = sse_reply([*frames("chat_stream.sse")[:2], b"Internal error: worker died\n"])
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    events = sse_json(await (await gw.post("/v1/chat/completions", json=STREAM)).read())
    assert len(events) == 4
    assert events[2]["error"]["message"] == "backend broke off the stream: Internal error: worker died"
    assert events[3] == "[DONE]"


async def test_client_disconnect_reaches_upstream(upstream, aiohttp_client):
    upstream.reply = sse_reply(frames("chat_stream.sse")[:2], hang=True, upstream=upstream)
    app = create_app(parse_config(one_route("openai", "openai", upstream.url)))
    gw = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
    resp = await gw.post("/v1/chat/completions", json=STREAM)
    assert resp.status == 200
    first = await resp.content.readuntil(b"\n\n")
    assert first == unasked(frames("chat_stream.sse")[0])
    resp.close()
    await asyncio.wait_for(upstream.disconnected.wait(), 5)
    metrics = ""
    for _ in range(100):
        metrics = await (await gw.get("/metrics")).text()
        if "gateway_client_disconnects_total{" in metrics:
            break
        await asyncio.sleep(0.02)
    assert 'gateway_client_disconnects_total{phase="streaming",route="r"} 1.0' in metrics
    assert 'gateway_in_flight_requests{route="r"} 0.0' in metrics


async def test_failover_between_replicas(upstream, make_gateway):
    upstream.reply = raw_reply(raw("chat_response.json"))
    cfg = {
        "backends": {"up": {"dialect": "openai", "urls": [closed_port_url(), upstream.url]}},
        "routes": [{"name": "r", "dialect": "openai", "backend": "up"}],
    }
    gw = await make_gateway(cfg)
    for body in (CHAT, CHAT, STREAM):
        if body is STREAM:
            upstream.reply = sse_reply(frames("chat_stream.sse"))
        resp = await gw.post("/v1/chat/completions", json=body)
        assert resp.status == 200
        await resp.read()
    assert len(upstream.requests) == 3


async def test_all_replicas_down(make_gateway):
    cfg = {
        "backends": {"up": {"dialect": "openai", "urls": [closed_port_url(), closed_port_url()]}},
        "routes": [{"name": "r", "dialect": "openai", "backend": "up"}],
    }
    gw = await make_gateway(cfg)
    await error_of(await gw.post("/v1/chat/completions", json=CHAT), 502)


async def test_gateway_still_serves_after_faults(upstream, make_gateway):
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    upstream.reply = raw_reply(b"garbage")
    await error_of(await gw.post("/v1/chat/completions", json=CHAT), 502)
    upstream.reply = raw_reply(raw("chat_response.json"))
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 200


async def test_concurrency_limit_is_503_and_released(upstream, aiohttp_client):
    upstream.reply = sse_reply(frames("chat_stream.sse")[:2], hang=True, upstream=upstream)
    cfg = one_route("openai", "openai", upstream.url)
    cfg["limits"] = {"max_concurrent_requests": 1}
    gw = await aiohttp_client(create_app(parse_config(cfg)), server_kwargs={"handler_cancellation": True})
    held = await gw.post("/v1/chat/completions", json=STREAM)
    assert held.status == 200
    await held.content.readuntil(b"\n\n")
    err = await error_of(await gw.post("/v1/chat/completions", json=CHAT), 503)
    assert err["type"] == "server_error"
    assert len(upstream.requests) == 1
    held.close()
    await asyncio.wait_for(upstream.disconnected.wait(), 5)
    upstream.reply = raw_reply(raw("chat_response.json"))
    for _ in range(100):
        resp = await gw.post("/v1/chat/completions", json=CHAT)
        if resp.status == 200:
            break
        await asyncio.sleep(0.02)
    assert resp.status == 200


@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_the_backend_received_is_never_sent_twice(upstream, make_gateway, stream):
    """A backend that drops the connection after reading the request may already be generating:
    sending it again would start a second generation (billed twice), so the client gets a 502."""
    calls = []

    async def reply(request, rec):
        calls.append(1)
        assert request.transport is not None
        request.transport.close()
        raise ConnectionResetError

    upstream.reply = reply
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    err = await error_of(await gw.post("/v1/chat/completions", json=body), 502)
    assert err["type"] == "server_error"
    assert len(calls) == 1
