"""Slow and oversized clients, spoken to with raw sockets against the gateway's real server.

The header deadline and header size cap live in the connection protocol (gateway.protocol), so
these tests run the gateway as `gateway serve` runs it, not through aiohttp's test server. The
deadlines are set short; every assertion waits on an event (a byte, a closed socket), never on
a stopwatch.
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from gateway import jsonutil, logs
from gateway.app import create_app
from gateway.config import parse_config
from gateway.protocol import Guard
from gateway.server import Listener, Switch, start_app
from tests.conftest import one_route
from tests.fixtures.openai.wire import raw
from tests.support import raw_reply

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@asynccontextmanager
async def guarded(config: dict[str, Any]) -> AsyncIterator[int]:
    """The gateway behind the listener `gateway serve` runs, on a port of its own."""
    conf = parse_config(config)
    app = create_app(conf)
    await start_app(app)
    listener = Listener(Switch(app), Guard.of(conf.limits))
    try:
        yield await listener.start("127.0.0.1", 0)
    finally:
        await listener.close()
        await listener.switch.close()


def limited(url: str, **limits: Any) -> dict[str, Any]:
    cfg = one_route("openai", "openai", url)
    cfg["limits"] = limits
    return cfg


async def read_all(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection."""
    return await asyncio.wait_for(reader.read(), 10)


async def chat_ok(port: int) -> None:
    async with aiohttp.ClientSession() as s, s.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=CHAT) as r:
        assert r.status == 200


async def test_dribbled_headers_get_408_and_the_connection_closes(upstream):
    upstream.reply = raw_reply(raw("chat_response.json"))
    async with guarded(limited(upstream.url, client_header_timeout_s=0.3)) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        await writer.drain()
        got = await read_all(reader)  # the server gives up and closes; the client never finished
        assert got.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert b"did not arrive within 0.3s" in got
        writer.close()
        # Other clients are served all along.
        await chat_ok(port)
    assert upstream.requests[-1].path == "/v1/chat/completions"


async def test_a_connection_that_sends_nothing_is_closed(upstream):
    async with guarded(limited(upstream.url, client_header_timeout_s=0.3)) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await read_all(reader) == b""
        writer.close()


async def test_many_slowloris_connections_all_close(upstream):
    upstream.reply = raw_reply(raw("chat_response.json"))
    async with guarded(limited(upstream.url, client_header_timeout_s=0.5)) as port:
        # Each starts its head at once: one that has sent nothing when its deadline passes is
        # closed without a word, and opening 200 can take longer than the deadline on a busy machine.
        conns = []
        for _ in range(200):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            conns.append((r, w))
        await asyncio.gather(*(w.drain() for _, w in conns))
        await chat_ok(port)
        answers = await asyncio.gather(*(read_all(r) for r, _ in conns))
        bad = [a[:80] for a in answers if not a.startswith(b"HTTP/1.1 408")]
        assert not bad, (len(bad), bad[:3])
        for _, w in conns:
            w.close()


async def test_the_header_deadline_restarts_for_each_request_on_a_kept_alive_connection(upstream):
    async with guarded(limited(upstream.url, client_header_timeout_s=0.3)) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(3):
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200")
            length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
            await reader.readexactly(length)
            # Idle between requests longer than the header deadline: that is keep-alive time.
            await asyncio.sleep(0.45)
        writer.close()


async def test_a_later_requests_dribbled_headers_get_their_own_full_deadline(upstream):
    # The connection's timer was set for its first request; the second request starts just
    # before it fires, dribbles, and is refused at its own deadline: neither then nor never.
    async with guarded(limited(upstream.url, client_header_timeout_s=0.3)) as port:
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 200")
        await asyncio.sleep(0.2)
        began = loop.time()
        writer.write(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
        await writer.drain()
        got = await read_all(reader)
        assert b"HTTP/1.1 408 Request Timeout\r\n" in got
        assert loop.time() - began >= 0.25  # not at the first request's deadline
        writer.close()


async def test_oversized_headers_get_431(upstream):
    async with guarded(limited(upstream.url, max_header_bytes=16 * 1024)) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        for i in range(40):  # 40 x 1 KB, each header well under aiohttp's own line limit
            writer.write(f"X-Filler-{i}: {'a' * 1000}\r\n".encode())
        await writer.drain()
        got = await read_all(reader)
        assert got.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
        writer.close()


async def test_a_body_that_comes_too_slowly_gets_408_in_the_dialects_shape(upstream):
    upstream.reply = raw_reply(raw("chat_response.json"))
    async with guarded(limited(upstream.url, client_body_timeout_s=0.3)) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{"
        )
        await writer.drain()
        got = await read_all(reader)
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408")
        err = jsonutil.loads(body)["error"]
        assert err["type"] == "invalid_request_error"
        assert "did not arrive within 0.3s" in err["message"]
        writer.close()
    assert upstream.requests == []


def expecting(length: int, key: str = "good", expect: str = "100-continue") -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {key}\r\nExpect: {expect}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


@pytest.mark.parametrize(
    ("key", "length", "expect", "status", "code"),
    [
        ("good", 2000, "100-continue", 413, None),
        ("wrong", 20, "100-continue", 401, "invalid_api_key"),
        ("good", 20, "something-else", 417, None),
    ],
    ids=["too-large", "no-key", "unknown-expectation"],
)
async def test_a_client_that_waits_for_100_continue_is_refused_before_it_sends_its_body(
    upstream, key, length, expect, status, code
):
    """The first answer is the refusal, not `100 Continue`: the body is never asked for."""
    cfg = limited(upstream.url, max_body_bytes=1000)
    cfg["auth"] = {"api_keys": ["good"]}
    async with guarded(cfg) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(expecting(length, key, expect))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 %d" % status)
        size = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))[15:])
        err = jsonutil.loads(await reader.readexactly(size))["error"]
        assert code is None or err["code"] == code
        writer.close()
    assert upstream.requests == []


async def test_a_client_that_waits_for_100_continue_is_asked_for_its_body(upstream):
    upstream.reply = raw_reply(raw("chat_response.json"))
    cfg = limited(upstream.url)
    cfg["auth"] = {"api_keys": ["good"]}
    body = jsonutil.dumps(CHAT)
    async with guarded(cfg) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(expecting(len(body)))
        await writer.drain()
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(body)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        writer.close()
    assert len(upstream.requests) == 1


async def unfinished_bodies(port: int, n: int, size: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    conns = []
    for _ in range(n):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {size}\r\n\r\n".encode()
            + b"{"
        )
        await w.drain()
        conns.append((r, w))
    return conns


async def status_of(port: int) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=CHAT) as r:
        return r.status, await r.json()


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(200):
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition never held")


async def test_unfinished_bodies_meet_the_body_budget_not_the_memory(upstream):
    upstream.reply = raw_reply(raw("chat_response.json"))
    config = limited(upstream.url, max_body_bytes=1_000_000, max_buffered_body_bytes=3_000_000)
    async with guarded(config) as port:
        held = await unfinished_bodies(port, 3, 1_000_000)  # each reserves a whole body's room

        async def refused() -> bool:
            status, body = await status_of(port)
            return status == 503 and "request bodies" in body["error"]["message"]

        await eventually(refused)
        for _, w in held:
            w.close()

        async def served() -> bool:
            return (await status_of(port))[0] == 200

        await eventually(served)


def test_limits_are_validated():
    from gateway.config import ConfigError

    with pytest.raises(ConfigError) as e:
        parse_config(limited("http://x:1", client_header_timeout_s=0))
    assert e.value.lines == ["limits.client_header_timeout_s: Input should be greater than 0"]
    with pytest.raises(ConfigError) as e:
        parse_config(limited("http://x:1", max_body_bytes=10_000, max_buffered_body_bytes=5_000))
    assert e.value.lines == ["limits: max_buffered_body_bytes must be at least max_body_bytes"]


async def test_malformed_requests_are_answered_and_logged_without_a_traceback(upstream, caplog):
    caplog.set_level(logging.DEBUG)
    logs.install_redaction()
    async with guarded(limited(upstream.url)) as port:
        for garbage in (
            b"GET / HTTP/1.1\r\nHost: x\r\nthis line has no colon\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
            b"GET /\x00 HTTP/1.1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
            b"GET /" + b"a" * 10000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n",
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(garbage)
            got = await read_all(reader)
            head, _, body = got.partition(b"\r\n\r\n")
            assert head.split(b"\r\n")[0].endswith(b" 400 Bad Request"), garbage
            # The same JSON shape as the header deadline's 408 and the cap's 431; the connection
            # closes after it (read_all read to the end).
            assert b"Content-Type: application/json" in head, head
            error = jsonutil.loads(body)["error"]
            assert error.startswith("the request is not valid HTTP/1.1: ") and "\\x00" not in error, error
            writer.close()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not any(r.exc_info for r in caplog.records if r.name.startswith("aiohttp"))
