"""A WholeAnswer's bytes are aiohttp's own: the same answer given as `web.Response` and as
`WholeAnswer` reaches a raw socket as the same bytes (the Date aside), and leaves the connection
open or closed alike, for every method, HTTP version, connection wish and status the gateway
answers with, bodies full, empty or untyped, headers added after the answer is made, a closing
answer, and a field that would inject another. A WholeAnswer sends no response-prepare signal,
so the gateway's apps must have none."""

import asyncio
import itertools
import re
from collections.abc import AsyncIterator, Iterable

import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import parse_config
from gateway.httpout import StreamAnswer, WholeAnswer
from tests.conftest import one_route

STATUSES = (200, 204, 304, 404, 503)
METHODS = ("POST", "HEAD", "GET")
# The request line's version and the Connection field a client adds, if any.
VERSIONS = (("1.1", None), ("1.1", "close"), ("1.0", None), ("1.0", "keep-alive"))
JSON = {"Content-Type": "application/json", "X-Request-Id": "abc"}
VARIANTS: dict[str, tuple[bytes | list[bytes], dict[str, str] | None, bool, tuple[str, str] | None]] = {
    # name: body, headers, force_close, a field added after
    "json": (b'{"a": 1}', JSON, False, None),
    "empty": (b"", None, False, None),
    "untyped": (b"data", None, False, None),
    "closing": (b'{"a": 1}', JSON, True, None),
    "added": (b'{"a": 1}', JSON, False, ("Retry-After", "3")),
    "typed-charset": ("é".encode(), {"Content-Type": "text/plain; charset=utf-8"}, False, None),
    "injected": (b"x", {"X-Bad": "a\r\nSet-Cookie: s=1"}, False, None),
    # A body in parts: short ones joined to the head, long ones written beside it.
    "parts": ([b'{"a": ', b"1}"], JSON, False, None),
    "long-parts": ([b"a" * 40_000, b"b" * 30_000, b"c"], JSON, False, None),
}


def _answer(kind: str, status: int, variant: str) -> web.StreamResponse:
    body, headers, closing, added = VARIANTS[variant]
    if kind == "aiohttp":
        whole = body if isinstance(body, bytes) else b"".join(body)
        resp: web.StreamResponse = web.Response(status=status, body=whole or None, headers=headers)
    else:
        resp = WholeAnswer(body, status=status, headers=headers)
    if closing:
        resp.force_close()
    if added is not None:
        resp.headers[added[0]] = added[1]
    return resp


async def _handler(request: web.Request) -> web.StreamResponse:
    m = request.match_info
    return _answer(m["kind"], int(m["status"]), m["variant"])


# A stream's pieces, written one by one, and its tail, written with its end.
STREAMS: dict[str, tuple[list[bytes], bytes]] = {
    "events": ([b"data: a\n\n", b"", b"data: b\n\n"], b"data: [DONE]\n\n"),
    "head-alone": ([b""], b"data: x\n\n"),
    "nothing": ([], b""),
    "long": ([b"a" * 40_000, b"b" * 20_000], b"c" * 17_000),
    "closing": ([b"data: a\n\n"], b""),
}


async def _streamer(request: web.Request) -> web.StreamResponse:
    m = request.match_info
    pieces, tail = STREAMS[m["variant"]]
    kind = web.StreamResponse if m["kind"] == "aiohttp" else StreamAnswer
    resp = kind(status=int(m["status"]), headers={"Content-Type": "text/event-stream", "X-Request-Id": "abc"})
    if m["variant"] == "closing":
        resp.force_close()
    await resp.prepare(request)
    for piece in pieces:
        await resp.write(piece)
    await resp.write_eof(tail)
    return resp


@pytest.fixture
async def port() -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_route("*", "/stream/{kind}/{status}/{variant}", _streamer)
    app.router.add_route("*", "/{kind}/{status}/{variant}", _handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def _exchange(port: int, method: str, path: str, version: str, connection: str | None) -> tuple[bytes, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    try:
        async with asyncio.timeout(10):  # an answer framed wrong is waited for no longer
            return await _read(reader, writer, method, path, version, connection)
    except asyncio.IncompleteReadError as e:
        return e.partial, b""
    finally:
        writer.close()


async def _read(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    method: str,
    path: str,
    version: str,
    connection: str | None,
) -> tuple[bytes, bytes]:
    """What the server sends for the request, and the status line of its answer to a second
    request on the same connection (b"" when it closed it instead)."""
    extra = f"Connection: {connection}\r\n" if connection else ""
    body = b"" if method != "POST" else b"{}"
    writer.write(
        f"{method} {path} HTTP/{version}\r\nHost: x\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode() + body
    )
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    found = re.search(rb"\r\nContent-Length: (\d+)\r\n", head)
    if method == "HEAD" or head.startswith((b"HTTP/1.1 204", b"HTTP/1.0 204", b"HTTP/1.1 304", b"HTTP/1.0 304")):
        sent = b""
    elif found:
        sent = await reader.readexactly(int(found.group(1)))
    elif b"\r\nTransfer-Encoding: chunked\r\n" in head:
        sent = await reader.readuntil(b"0\r\n\r\n")
    else:
        sent = await reader.read()  # to the connection's end
    writer.write(f"GET {path} HTTP/{version}\r\nHost: x\r\n{extra}\r\n".encode())
    try:
        second = await reader.readline()
    except ConnectionResetError:  # closed with the second request unread
        second = b""
    return head + sent, second


def _undated(raw: bytes) -> bytes:
    return re.sub(rb"\r\nDate: [^\r]*\r\n", b"\r\nDate: -\r\n", raw)


async def _same(
    port: int, theirs: str, ours: str, cases: Iterable[tuple[str, tuple[str, str | None], int, str]]
) -> None:
    """Each case (method, version and connection wish, status, variant) asked of aiohttp's answer
    under `theirs` and ours under `ours`: the same bytes, and the connection left alike."""
    for method, (version, connection), status, variant in cases:
        expected = await _exchange(port, method, f"{theirs}/{status}/{variant}", version, connection)
        got = await _exchange(port, method, f"{ours}/{status}/{variant}", version, connection)
        case = (method, version, connection, status, variant)
        assert _undated(got[0]) == _undated(expected[0]), case
        assert got[1] == expected[1], case


async def test_the_bytes_are_aiohttps_own(port: int) -> None:
    await _same(port, "/aiohttp", "/whole", itertools.product(METHODS, VERSIONS, STATUSES, VARIANTS))


async def test_a_streams_bytes_are_aiohttps_own(port: int) -> None:
    # (A stream is never a 204 or 304: aiohttp would write its pieces after such a head all the same.)
    # (Nor is an HTTP/1.0 client's keep-alive asked of a stream: aiohttp keeps that connection
    # open though the body's end is its close. Ours closes it: see the test below.)
    versions = [v for v in VERSIONS if v != ("1.0", "keep-alive")]
    await _same(
        port, "/stream/aiohttp", "/stream/ours", itertools.product(("POST", "GET"), versions, (200, 404), STREAMS)
    )


async def test_a_stream_to_an_http10_client_ends_with_the_connection(port: int) -> None:
    sent, second = await _exchange(port, "POST", "/stream/ours/200/events", "1.0", "keep-alive")
    head, _, body = sent.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 OK\r\n") and b"\r\nConnection:" not in head
    assert b"Transfer-Encoding" not in head and b"Content-Length" not in head
    assert (body, second) == (b"data: a\n\ndata: b\n\ndata: [DONE]\n\n", b"")


async def test_a_field_that_would_inject_another_sends_nothing(port: int) -> None:
    sent, second = await _exchange(port, "POST", "/whole/200/injected", "1.1", None)
    assert (sent, second) == (b"", b"")


def test_the_gateways_apps_send_no_response_prepare_signal() -> None:
    conf = parse_config(one_route("openai", "openai", "http://127.0.0.1:9"))
    assert not create_app(conf).on_response_prepare


def test_a_whole_answer_keeps_its_body() -> None:
    resp = WholeAnswer([b"ab", b"c"], status=404, headers={"Content-Type": "text/plain"})
    assert (resp.status, resp.body, resp.headers["content-type"]) == (404, b"abc", "text/plain")
    assert not resp.prepared
