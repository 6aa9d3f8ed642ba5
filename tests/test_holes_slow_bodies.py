"""Request bodies that come slowly, or not at all, cost only the body room they hold.

Spoken to with raw sockets against the gateway's real server. A slow sender asks to be told to
send (`Expect: 100-continue`), so that the gateway's `100 Continue` marks the moment its handler
is waiting for that body: every assertion waits on what the gateway sends, never on a stopwatch.
"""

import asyncio
from typing import Any

from gateway import jsonutil
from tests.fixtures.openai.wire import raw
from tests.support import raw_reply
from tests.test_holes_slow_clients import CHAT, guarded, limited, read_all, status_of

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def start_body(port: int, size: int, *headers: str, source: str = "127.0.0.1") -> tuple[Conn, bytes]:
    """A request of `size` body bytes from `source`, sent only as far as a part of its body (when
    the gateway asks for it): the connection, and the first thing the gateway answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    extra = "".join(f"{h}\r\n" for h in headers)
    writer.write(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"{extra}Expect: 100-continue\r\nContent-Length: {size}\r\n\r\n".encode()
    )
    await writer.drain()
    first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    if first == CONTINUE:
        writer.write(b'{"model": "m", ')
        await writer.drain()
    return (reader, writer), first


async def whole_request(port: int, source: str = "127.0.0.1") -> bytes:
    """A small request whose body comes in the same write as its headers: the answer's status line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    body = jsonutil.dumps(CHAT)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)
    writer.close()
    return head


def close(conns: list[Conn]) -> None:
    for _, w in conns:
        w.close()


async def refusal(conn: Conn, first: bytes) -> dict[str, Any]:
    """A 429 with Retry-After given before the body was asked for, after which the connection
    closes: its error body."""
    assert first.startswith(b"HTTP/1.1 429 "), first
    assert b"\r\nRetry-After: 1\r\n" in first
    assert b"\r\nConnection: close\r\n" in first
    body = await read_all(conn[0])  # to the end: the gateway closed the connection
    error: dict[str, Any] = jsonutil.loads(body)["error"]
    return error


async def test_slow_bodies_hold_no_request_slot(upstream):
    upstream.reply = raw_reply(raw("chat_response.json"))
    async with guarded(limited(upstream.url, max_concurrent_requests=2)) as port:
        started = [await start_body(port, 1000) for _ in range(5)]
        assert [first for _, first in started] == [CONTINUE] * 5  # each is waited for
        # Five bodies on their way and two slots: a request ready to go is served at once.
        assert (await status_of(port))[0] == 200
        assert await whole_request(port) == b"HTTP/1.1 200 OK\r\n"
        close([conn for conn, _ in started])
    assert len(upstream.requests) == 2


async def test_a_body_that_falls_behind_the_minimum_rate_is_cut_with_408(upstream):
    upstream.reply = raw_reply(raw("chat_response.json"))
    # The body deadline is far off: only the rate can cut the slow body in this test's time.
    config = limited(upstream.url, min_body_rate_bytes_s=2000, body_rate_grace_s=0.2, client_body_timeout_s=60)
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "' + b"u" * 3000 + b'"}'
    async with guarded(config) as port:

        async def send(chunk: int, stall_at: int = len(body)) -> tuple[bytes, bytes]:
            """The body in pieces of `chunk` bytes every 20 ms (none past `stall_at`), until the
            gateway answers: the answer's head, and the body of one that closes the connection."""
            (reader, writer), first = await start_body(port, len(body))
            assert first == CONTINUE
            sent = len(b'{"model": "m", ')  # start_body sent the body's start
            answer = asyncio.ensure_future(reader.readuntil(b"\r\n\r\n"))
            while not answer.done():
                writer.write(body[sent : min(sent + chunk, stall_at)])
                sent = min(sent + chunk, stall_at)
                await asyncio.wait([answer], timeout=0.02)
            head = await asyncio.wait_for(answer, 10)
            text = await read_all(reader) if b"\r\nConnection: close\r\n" in head else b""
            writer.close()
            return head, text

        # 2 bytes per 20 ms (100 bytes a second); 1000 (50,000 a second); and most of the body at
        # once, then nothing, side by side.
        trickle, fast, stalled = await asyncio.gather(send(2), send(1000), send(4000, stall_at=len(body) - 1))
    assert fast[0].startswith(b"HTTP/1.1 200 OK\r\n")
    for head, text in (trickle, stalled):
        assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        err = jsonutil.loads(text)["error"]
        assert err["type"] == "invalid_request_error"
        assert err["message"] == "The request body came slower than the minimum of 2000 bytes a second"
    assert len(upstream.requests) == 1


async def test_a_client_past_its_unfinished_bodies_gets_429_and_another_client_does_not(upstream):
    upstream.reply = raw_reply(raw("chat_response.json"))
    async with guarded(limited(upstream.url, max_unfinished_bodies_per_client=2)) as port:
        held = [await start_body(port, 1000) for _ in range(2)]
        assert [first for _, first in held] == [CONTINUE] * 2
        conn, first = await start_body(port, 1000)
        err = await refusal(conn, first)
        assert err["type"] == "rate_limit_exceeded"
        assert "request bodies" in err["message"]
        # Another client's slow body is asked for; this one's whole requests are still served.
        other, first = await start_body(port, 1000, source="127.0.0.2")
        assert first == CONTINUE
        assert await whole_request(port) == b"HTTP/1.1 200 OK\r\n"
        # A body finished (here: given up) frees its place.
        close([held[0][0]])
        again, first = await start_body(port, 1000)
        assert first == CONTINUE
        close([c for c, _ in held[1:]] + [conn, other, again])


async def test_behind_a_trusted_proxy_the_forwarded_client_is_what_counts(upstream):
    upstream.reply = raw_reply(raw("chat_response.json"))
    config = limited(upstream.url, max_unfinished_bodies_per_client=2)
    config["listen"] = {"trusted_proxies": ["127.0.0.1/32"]}
    async with guarded(config) as port:
        a, b = "X-Forwarded-For: 203.0.113.5", "X-Forwarded-For: 203.0.113.6"
        held = [await start_body(port, 1000, a) for _ in range(2)]
        assert [first for _, first in held] == [CONTINUE] * 2
        # Through the same proxy connection address: the other forwarded client is asked for its body.
        other, first = await start_body(port, 1000, b)
        assert first == CONTINUE
        refused, first = await start_body(port, 1000, a)
        await refusal(refused, first)
        close([c for c, _ in held] + [other, refused])
