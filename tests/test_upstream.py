"""The gateway's own HTTP/1.1 client (gateway.upstream) against a raw server scripted byte by byte."""

import asyncio
import collections
import logging
import os
import random
import socket
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Callable

import pytest

import gateway.upstream as up
from gateway.upstream import connection
from tests.support import Handler, Peer, Server, answering, once

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
HELD = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello"  # half a body; the rest never comes
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
END = b"0\r\n\r\n"
TEXT = b"".join(b"line %d of the answer\n" % i for i in range(20_000))
# Every line and their number within bounds, but 96 KB in all.
BIG_HEAD = b"HTTP/1.1 200 OK\r\n" + b"X-A: %s\r\n" % (b"v" * 1600) * 60 + b"Content-Length: 2\r\n\r\nok"


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def frame(part: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(part), part)


def packed(data: bytes, wbits: int, coding: bytes = b"gzip", cut: int = 0) -> bytes:
    """An answer of `data` compressed (gzip, zlib-wrapped or raw deflate by `wbits`), less its last `cut` bytes."""
    z = zlib.compressobj(9, zlib.DEFLATED, wbits)
    body = (z.compress(data) + z.flush())[: -cut or None]
    return b"HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n%s" % (coding, len(body), body)


async def send(
    pool: up.Pool,
    target: up.Target,
    method: str = "GET",
    body: bytes | None = None,
    *,
    headers: dict[str, str] | None = None,
    connect_timeout: float = 1.0,
    timeout: float | None = 2.0,
    gap: bool = False,
) -> up.Answer:
    return await pool.request(
        target, method, headers or {}, body, connect_timeout=connect_timeout, timeout=timeout, gap=gap
    )


async def fetch(pool: up.Pool, target: up.Target) -> bytes | None:
    answer = await send(pool, target)
    body = await answer.read(1 << 20)
    answer.release()
    return body


async def chunks(answer: up.Answer) -> list[bytes]:
    """Every chunk() up to the end of the body."""
    got = []
    while piece := await answer.chunk():
        got.append(piece)
    return got


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(2):
        while not condition():
            await asyncio.sleep(0.005)


@pytest.fixture
async def pool() -> AsyncIterator[up.Pool]:
    p = up.Pool(4)
    yield p
    await p.close()


# ---- what goes out ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url", "headers", "body", "expected"),
    [
        (
            "POST",
            "/v1/x?y=1",
            {"X-One": "1", "content-type": "application/json", "X-Two": "2"},
            b'{"a":1}',
            b"POST /v1/x?y=1 HTTP/1.1\r\nHost: HOST\r\nX-One: 1\r\ncontent-type: application/json\r\n"
            b'X-Two: 2\r\nContent-Length: 7\r\n\r\n{"a":1}',
        ),
        ("GET", "/v1/models", {"Accept": "*/*"}, None, b"GET /v1/models HTTP/1.1\r\nHost: HOST\r\nAccept: */*\r\n\r\n"),
        ("GET", "/a b/é?q=ü", {}, None, b"GET /a%20b/%C3%A9?q=%C3%BC HTTP/1.1\r\nHost: HOST\r\n\r\n"),
        ("GET", "u:p@/", {}, None, b"GET / HTTP/1.1\r\nHost: HOST\r\nAuthorization: Basic dTpw\r\n\r\n"),
        (
            "GET",
            "us%40er:p%3Ass@/",
            {},
            None,
            b"GET / HTTP/1.1\r\nHost: HOST\r\nAuthorization: Basic dXNAZXI6cDpzcw==\r\n\r\n",
        ),
        # The backend's own Host (a virtual host) and credentials win over the URL's: one of each.
        ("GET", "/", {"host": "models.internal"}, None, b"GET / HTTP/1.1\r\nhost: models.internal\r\n\r\n"),
        (
            "GET",
            "u:p@/",
            {"Authorization": "Bearer t"},
            None,
            b"GET / HTTP/1.1\r\nHost: HOST\r\nAuthorization: Bearer t\r\n\r\n",
        ),
    ],
    ids=["post", "get", "percent-encoded", "userinfo", "encoded-userinfo", "own-host", "own-credentials"],
)
async def test_the_request_goes_out_byte_for_byte(
    pool: up.Pool, method: str, url: str, headers: dict[str, str], body: bytes | None, expected: bytes
) -> None:
    async with Server(answering(OK)) as srv:
        userinfo, at, path = url.rpartition("@")
        answer = await send(
            pool, up.Target.of(f"http://{userinfo}{at}127.0.0.1:{srv.port}{path}"), method, body, headers=headers
        )
        assert await answer.read(100) == b"ok"
        answer.release()
    host = b"127.0.0.1:%d" % srv.port
    assert srv.requests == [expected.replace(b"HOST", host)]


@pytest.mark.parametrize(
    "headers",
    [
        {"X-A": "a\r\nX-Smuggled: 1"},
        {"X-A": "a\nb"},
        {"X-A": "a\rb"},
        {"X-A": "a\x00b"},
        {"X-A\r\nX-B": "1"},
        {"X\x00": "1"},
    ],
)
async def test_a_line_break_or_nul_in_a_header_is_unsendable(headers: dict[str, str]) -> None:
    async with Server(answering(OK)) as srv:
        pool = up.Pool(1)
        with pytest.raises(up.Unsendable):
            await send(pool, srv.target("/bad"), headers={"X-Ok": "1", **headers})
        assert await fetch(pool, srv.target("/good")) == b"ok"  # nor did it keep the only slot
        await pool.close()
    assert srv.requests == [b"GET /good HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % srv.port]


# ---- reading answers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 300\r\nX-A: b\r\n\r\n" + TEXT[:300],
        CHUNKED[:-2] + b"X-A: b\r\n\r\n" + frame(TEXT[:100]) + frame(TEXT[100:101]) + frame(TEXT[101:300]) + END,
    ],
    ids=["content-length", "chunked"],
)
async def test_an_answer_in_many_small_writes_is_read_whole_or_piece_by_piece(pool: up.Pool, raw: bytes) -> None:
    async with Server(answering(*split(raw, 23))) as srv:
        answer = await send(pool, srv.target())
        assert (answer.status, answer.headers.get("X-a"), await answer.read(1000)) == (200, "b", TEXT[:300])
        answer.release()
        answer = await send(pool, srv.target())
        got = await chunks(answer)
        assert b"".join(got) == TEXT[:300] and len(got) > 1  # in order, as they came
        assert await answer.chunk() == b""
        answer.release()


@pytest.mark.parametrize("version", [b"HTTP/1.0", b"HTTP/1.1"])
async def test_a_body_ended_by_close_is_read_whole_and_the_connection_not_reused(pool: up.Pool, version: bytes) -> None:
    async with Server(once(version + b" 200 OK\r\nX-A: b\r\n\r\n", *split(TEXT[:5000], 1000), hold=False)) as srv:
        for _ in range(2):
            assert await fetch(pool, srv.target()) == TEXT[:5000]
    assert srv.accepts == 2


@pytest.mark.parametrize("pause", [0.0, 0.05], ids=["one-write", "apart"])
async def test_an_interim_103_is_passed_over(pool: up.Pool, pause: float) -> None:
    early = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
    final = b"HTTP/1.1 200 OK\r\nX-Final: yes\r\nContent-Length: 4\r\n\r\nbody"
    async with Server(answering(*([early, final] if pause else [early + final]), pause=pause)) as srv:
        answer = await send(pool, srv.target())
        assert (answer.status, answer.headers.get("x-final"), "link" in answer.headers) == (200, "yes", False)
        assert await answer.read(100) == b"body"
        answer.release()


# ---- keeping connections ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "how", "connections"),
    [
        (OK, "read-release", 1),
        (OK.replace(b"OK\r\n", b"OK\r\nConnection: close\r\n"), "read-release", 2),
        (OK, "read-close", 2),
        (HELD, "part-release", 2),
        (HELD, "cancelled-read", 2),
    ],
    ids=["kept-alive", "connection-close", "closed", "not-read-to-the-end", "cancelled-read"],
)
async def test_a_connection_is_reused_only_after_a_whole_answer_released(
    pool: up.Pool, first: bytes, how: str, connections: int
) -> None:
    async def handle(peer: Peer) -> None:
        await peer.request()
        await peer.send(first if peer.index == 1 else OK)
        while await peer.request():
            await peer.send(OK)

    async with Server(handle) as srv:
        answer = await send(pool, srv.target())
        if first is HELD:
            assert await answer.chunk() == b"hello"
        else:
            assert await answer.read(100) == b"ok"
        if how == "cancelled-read":
            reading = asyncio.create_task(answer.chunk())
            await asyncio.sleep(0.05)
            reading.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reading
        if how == "read-close":
            answer.close()
        else:
            answer.release()
        assert await fetch(pool, srv.target()) == b"ok"
    assert (srv.accepts, len(srv.requests)) == (connections, 2)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (b"timeout=5", 4.0),
        (b"timeout=5, max=100", 4.0),
        (b"max=99,timeout=2", 1.0),
        (b' timeout="3"\r', 2.0),
        (b"timeout=1.5", 0.5),
        (b"timeout=1", 0.0),
        (b"timeout=0", 0.0),
        (b"timeout=600", 4.0),
        (b"timeout=soon", 4.0),
        (b"max=5", 4.0),
        (b"", 4.0),
    ],
)
def test_keep_alive_timeouts_are_kept_under(value: bytes, seconds: float) -> None:
    assert connection.keep_for(value) == seconds


@pytest.mark.parametrize(
    ("announced", "wait", "connections"),
    [(None, 0.3, 1), (None, 0.7, 2), (b"timeout=1.2", 0.05, 1), (b"timeout=1.2", 0.3, 2), (b"timeout=1", 0.0, 2)],
    ids=["default-soon", "default-past", "announced-soon", "announced-past", "announced-nothing-left"],
)
async def test_a_connection_unused_past_its_time_is_not_used_again(
    pool: up.Pool, monkeypatch: pytest.MonkeyPatch, announced: bytes | None, wait: float, connections: int
) -> None:
    """The gateway lets go of an idle connection before the backend would close it under a
    request: after KEEP_IDLE_S (here 0.6 s), or a second under a shorter timeout the backend
    announces."""
    monkeypatch.setattr(connection, "KEEP_IDLE_S", 0.6)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
    if announced is not None:
        head += b"Keep-Alive: " + announced + b"\r\n"
    async with Server(answering(head + b"\r\nok", pause=0)) as srv:
        assert await fetch(pool, srv.target()) == b"ok"
        await asyncio.sleep(wait)
        assert await fetch(pool, srv.target()) == b"ok"
    assert (srv.accepts, len(srv.requests)) == (connections, 2)


async def test_idle_connections_close_at_their_time_without_another_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst's connections are let go when their idle time is up, not left open until a
    request comes to find them stale: the backend sees each one closed, nothing more asked."""
    monkeypatch.setattr(connection, "KEEP_IDLE_S", 1.0)
    handle, go = holding()
    async with Server(handle) as srv:
        pool = up.Pool(8)
        tasks = [asyncio.create_task(fetch(pool, srv.target(f"/{i}"))) for i in range(5)]
        await until(lambda: len(srv.requests) == 5)
        for path in srv.paths():
            go[path].set()
        assert await asyncio.gather(*tasks) == [b"ok"] * 5
        assert srv.open == 5  # kept for the next requests, for now
        await until(lambda: srv.open == 0)
        assert (srv.accepts, len(srv.requests)) == (5, 5)
        await pool.close()


def holding() -> tuple[Handler, dict[bytes, asyncio.Event]]:
    """A handler that answers a request for a path once the test sets that path's event."""
    go: dict[bytes, asyncio.Event] = collections.defaultdict(asyncio.Event)

    async def handle(peer: Peer) -> None:
        while raw := await peer.request():
            await go[raw.split(b" ")[1]].wait()
            await peer.send(OK)

    return handle, go


async def test_the_limit_holds_a_third_request_until_one_is_released() -> None:
    handle, go = holding()
    async with Server(handle) as srv:
        pool = up.Pool(2)
        tasks = [asyncio.create_task(fetch(pool, srv.target(f"/{i}"))) for i in range(3)]
        await until(lambda: len(srv.requests) == 2)
        await asyncio.sleep(0.05)
        assert (len(srv.requests), srv.accepts) == (2, 2)
        go[srv.paths()[0]].set()
        await until(lambda: len(srv.requests) == 3)
        for path in (b"/0", b"/1", b"/2"):
            go[path].set()
        assert await asyncio.gather(*tasks) == [b"ok"] * 3
        await pool.close()
    assert srv.most_open == 2


@pytest.mark.parametrize("as_its_turn_comes", [False, True])
async def test_a_cancelled_waiter_neither_takes_nor_loses_a_slot(as_its_turn_comes: bool) -> None:
    handle, go = holding()
    for path in (b"/1", b"/b", b"/c"):
        go[path].set()
    async with Server(handle) as srv:
        pool = up.Pool(1)
        first = await send(pool, srv.target("/1"))
        assert await first.read(100) == b"ok"
        a = asyncio.create_task(fetch(pool, srv.target("/a")))
        b = asyncio.create_task(fetch(pool, srv.target("/b")))
        await asyncio.sleep(0.05)
        if not as_its_turn_comes:
            a.cancel()
            await asyncio.sleep(0.01)
        first.release()  # wakes the first waiter...
        a.cancel()  # ...which, cancelled before it ran, must hand its turn on
        assert await asyncio.wait_for(b, 2) == b"ok"
        assert a.cancelled()
        assert await asyncio.wait_for(fetch(pool, srv.target("/c")), 2) == b"ok"
        await pool.close()
    assert srv.paths() == [b"/1", b"/b", b"/c"]


# ---- bad answers --------------------------------------------------------------------------------


async def endless_header(peer: Peer) -> None:
    await peer.request()
    await peer.send(b"HTTP/1.1 200 OK\r\nX-Endless: ")
    for _ in range(16 * 1024):  # 64 MiB at most, were nothing to stop it
        peer.writer.write(b"a" * 4096)
        await peer.writer.drain()
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("handler", "fault"),
    [
        (once(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 20_000 + b"\r\nContent-Length: 2\r\n\r\nok"), up.BadAnswer),
        (once(b"HTTP/1.1 200 OK\r\n" + b"X-A: v\r\n" * 200 + b"Content-Length: 0\r\n\r\n"), up.BadAnswer),
        (endless_header, up.BadAnswer),
        (once(b"garbage\r\n\r\n"), up.BadAnswer),
        (once(b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\nok"), up.BadAnswer),
        (once(BIG_HEAD[:60_000], BIG_HEAD[60_000:]), up.BadAnswer),
        (once(hold=False), up.Broken),
        (once(), up.ReadTimeout),
    ],
    ids=[
        "long-line",
        "200-headers",
        "endless-line",
        "not-http",
        "brotli",
        "96-kb-head",
        "closed-unanswered",
        "no-head-in-time",
    ],
)
async def test_a_head_that_fails_raises_from_request(pool: up.Pool, handler: Handler, fault: type[Exception]) -> None:
    async with Server(handler) as srv:
        with pytest.raises(fault):
            await send(pool, srv.target(), timeout=0.5)  # the endless line is cut off long before


@pytest.mark.parametrize("upgrade", [b"Upgrade: websocket\r\nConnection: Upgrade\r\n", b""], ids=["upgrade", "bare"])
async def test_an_unasked_switch_of_protocols_is_a_bad_answer_and_no_error_log(
    pool: up.Pool, caplog: pytest.LogCaptureFixture, upgrade: bytes
) -> None:
    async with Server(once(b"HTTP/1.1 101 Switching Protocols\r\n" + upgrade + b"\r\n\x81\x02hi")) as srv:
        with pytest.raises(up.BadAnswer) as e:
            await send(pool, srv.target())
    assert str(e.value) == "switched protocols (101) though the gateway asked for no upgrade"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize("reader", ["read", "chunk"])
@pytest.mark.parametrize(
    ("handler", "fault", "message"),
    [
        (once(CHUNKED, frame(b"hello"), b"zz\r\nhello\r\n"), up.BadAnswer, "sent a body whose framing is not HTTP/1.1"),
        (
            once(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", b"0123456789", hold=False),
            up.Broken,
            "closed the connection in the middle of its answer",
        ),
        (
            once(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 10\r\n\r\n", b"not gzip!!"),
            up.BadAnswer,
            "sent a body that does not decode as gzip",
        ),
        (once(packed(TEXT, 31, cut=26_000)), up.BadAnswer, "sent a gzip body that stops short of its end"),
        (once(packed(TEXT, 31, cut=4)), up.BadAnswer, "sent a gzip body that stops short of its end"),
    ],
    ids=["bad-chunk-size", "short-body", "not-gzip", "gzip-cut-half", "gzip-without-its-trailer"],
)
async def test_a_body_that_breaks_off_says_how(
    pool: up.Pool, handler: Handler, fault: type[Exception], message: str, reader: str
) -> None:
    """The connection closing early is Broken; a body it carried whole that cannot be read is a
    BadAnswer, which names what is wrong with it."""
    async with Server(handler) as srv:
        answer = await send(pool, srv.target())
        with pytest.raises(fault) as e:
            await (answer.read(1 << 20) if reader == "read" else chunks(answer))
        assert str(e.value) == message
        answer.close()


@pytest.mark.parametrize(("coding", "wbits"), [(b"gzip", 31), (b"x-gzip", 31), (b"deflate", 15), (b"deflate", -15)])
async def test_a_compressed_body_is_decoded(pool: up.Pool, coding: bytes, wbits: int) -> None:
    async with Server(answering(*split(packed(TEXT, wbits, coding), 20_000))) as srv:
        answer = await send(pool, srv.target())
        assert await answer.read(len(TEXT)) == TEXT
        answer.release()


async def test_an_empty_body_is_empty_in_any_coding(pool: up.Pool) -> None:
    async with Server(answering(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 0\r\n\r\n")) as srv:
        answer = await send(pool, srv.target())
        assert await answer.read(100) == b""
        answer.release()


async def test_a_gzip_bomb_is_not_decoded_past_the_limit(pool: up.Pool) -> None:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join(z.compress(bytes(1 << 20)) for _ in range(64)) + z.flush()  # 64 MiB of zeros
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb)
    async with Server(once(head + bomb)) as srv:
        answer = await send(pool, srv.target())
        tracemalloc.start()
        try:
            assert await answer.read(1 << 20) is None
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 16 << 20  # a few pieces decoded, not the 64 MiB
        answer.close()


# ---- time and connecting ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stall", "gap", "fault"),
    [(0.0, True, None), (0.4, True, up.ReadTimeout), (0.0, False, up.ReadTimeout)],
    ids=["short-gaps", "a-stall-past-the-gap", "whole-answer-past-its-deadline"],
)
async def test_a_stream_of_pieces_every_50ms_for_half_a_second(
    pool: up.Pool, stall: float, gap: bool, fault: type[Exception] | None
) -> None:
    """timeout=0.2: with `gap` it bounds each wait for the next piece, without it the whole answer."""
    pieces = [frame(b"%d," % i) for i in range(10)]

    async def handle(peer: Peer) -> None:
        await peer.request()
        await peer.send(CHUNKED, *pieces[:5], pause=0.05)
        await asyncio.sleep(stall)
        await peer.send(*pieces[5:], END, pause=0.05)
        await peer.rest()

    async with Server(handle) as srv:
        answer = await send(pool, srv.target(), timeout=0.2, gap=gap)
        if fault is None:
            assert b"".join(await chunks(answer)) == b"".join(b"%d," % i for i in range(10))
        else:
            with pytest.raises(fault):
                await chunks(answer)
            assert issubclass(fault, TimeoutError)
        answer.close()


async def dribbling(peer: Peer) -> None:
    """A head a byte at a time, each well within the gap after the one before, that never ends."""
    await peer.request()
    head = b"HTTP/1.1 200 OK\r\n"
    while True:
        await peer.send(*split(head, 1), pause=0.02)
        head = b"X-Slow: a\r\n"


@pytest.mark.parametrize(
    ("timeout", "head_timeout", "gap"),
    [(0.2, None, True), (30.0, 0.2, True), (30.0, 0.2, False), (0.2, 30.0, False)],
    ids=["stream", "stream-head-bound", "whole-head-bound", "whole-answer-bound"],
)
async def test_a_head_must_come_whole_within_its_deadline(
    pool: up.Pool, timeout: float, head_timeout: float | None, gap: bool
) -> None:
    """Bytes of a head, however often they come, do not put its deadline off: the head must be
    all there within `head_timeout` (unset: `timeout`), and a whole answer's within `timeout`
    too. (The head here never ends: without its deadline the test is cut off at 5 s.)"""
    async with Server(dribbling) as srv:
        with pytest.raises(up.ReadTimeout):
            await pool.request(
                srv.target(), "GET", {}, None, connect_timeout=1, timeout=timeout, head_timeout=head_timeout, gap=gap
            )


async def test_after_a_slow_head_a_streams_gaps_are_bounded_again(pool: up.Pool) -> None:
    """A head allowed long (`head_timeout` 30 s) comes in pieces; after it, each wait for the next
    piece is bounded by the gap (0.2 s) again, not by what was left of the head's deadline."""

    async def handle(peer: Peer) -> None:
        await peer.request()
        head = split(CHUNKED, 8)
        await peer.send(*head[:-1], pause=0.05)  # 0.3 s in all, longer than a gap
        await peer.send(head[-1] + frame(b"one"))
        await peer.rest()  # and then nothing

    async with Server(handle) as srv:
        answer = await pool.request(
            srv.target(), "GET", {}, None, connect_timeout=1, timeout=0.2, head_timeout=30, gap=True
        )
        assert await answer.chunk() == b"one"
        with pytest.raises(up.ReadTimeout):
            await answer.chunk()
        answer.close()


async def test_an_answer_left_unread_longer_than_its_gap_is_not_timed_out(pool: up.Pool) -> None:
    """The gap bounds each wait for the next piece: a reader that has not taken what came is not
    waiting, and the backend that sent it all at once did not stop."""
    body = TEXT * 3
    async with Server(once(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))) as srv:
        answer = await send(pool, srv.target(), timeout=0.2, gap=True)
        await asyncio.sleep(0.5)
        assert b"".join(await chunks(answer)) == body
        answer.release()


async def test_a_closed_port_is_connect_failed(pool: up.Pool) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(up.ConnectFailed):
        await send(pool, up.Target.of(f"http://127.0.0.1:{port}/"))


async def test_a_connect_not_answered_in_time_is_connect_timeout(pool: up.Pool) -> None:
    """A listener whose accept queue is full drops further SYNs, so the connect hangs (surer than an
    unroutable address, which a network in between may answer)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        fillers = [socket.socket() for _ in range(3)]
        for f in fillers:
            f.setblocking(False)
            f.connect_ex(listener.getsockname())
        try:
            with pytest.raises(up.ConnectTimeout):
                await send(pool, up.Target.of(f"http://127.0.0.1:{listener.getsockname()[1]}/"), connect_timeout=0.2)
        finally:
            for f in fillers:
                f.close()


# ---- the connection after the answer ------------------------------------------------------------


@pytest.mark.parametrize(
    ("apart", "hold"), [(False, 0.0), (True, 0.1), (True, 0.0)], ids=["same-write", "before-release", "while-idle"]
)
async def test_bytes_after_a_whole_answer_spoil_the_connection(pool: up.Pool, apart: bool, hold: float) -> None:
    first = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"
    stray = b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\nstray"

    async def handle(peer: Peer) -> None:
        await peer.request()
        await peer.send(*(([first, stray] if apart else [first + stray]) if peer.index == 1 else [OK]), pause=0.03)
        while await peer.request():
            await peer.send(OK)

    async with Server(handle) as srv:
        answer = await send(pool, srv.target())
        assert (answer.status, await answer.read(100)) == (200, b"first")
        await asyncio.sleep(hold)
        answer.release()
        await asyncio.sleep(0.1)
        assert await fetch(pool, srv.target()) == b"ok"
    assert srv.accepts == 2


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_kept_alive_connection_closed_under_a_request(pool: up.Pool, method: str) -> None:
    """A GET goes again on a new connection; a POST is never sent twice."""

    async def handle(peer: Peer) -> None:
        await peer.request()
        await peer.send(OK)
        if peer.index == 1:
            await peer.request()  # and close without answering

    async with Server(handle) as srv:
        assert await fetch(pool, srv.target("/warm")) == b"ok"
        if method == "GET":
            assert await fetch(pool, srv.target("/x")) == b"ok"
        else:
            with pytest.raises(up.Broken):
                await send(pool, srv.target("/x"), "POST", b"{}")
            await asyncio.sleep(0.1)
    assert srv.paths().count(b"/x") == srv.accepts == (2 if method == "GET" else 1)


async def test_a_reader_that_reads_nothing_holds_the_backend_back(pool: up.Pool) -> None:
    body = os.urandom(16 << 20)
    writers: list[asyncio.StreamWriter] = []

    async def handle(peer: Peer) -> None:
        await peer.request()
        writers.append(peer.writer)
        peer.writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await peer.rest()

    async with Server(handle) as srv:
        answer = await send(pool, srv.target(), timeout=None)
        await asyncio.sleep(0.3)
        assert writers[0].transport.get_write_buffer_size() > 0  # the client stopped taking
        assert answer._conn is not None and answer._conn._buffered <= 1 << 20  # what it holds
        assert b"".join(await chunks(answer)) == body
        answer.release()


async def test_meanwhile_runs_once_the_request_is_written_before_its_answer(pool: up.Pool) -> None:
    # The backend answers only once the work is done: the work cannot wait for the answer.
    done = asyncio.Event()
    calls: list[None] = []

    async def handle(peer: Peer) -> None:
        await peer.request()
        await done.wait()
        await peer.send(OK)
        await peer.rest()

    def work() -> None:
        calls.append(None)
        done.set()

    async with Server(handle) as srv:
        answer = await pool.request(srv.target(), "GET", {}, None, connect_timeout=5, timeout=5, meanwhile=work)
        assert await answer.read(100) == b"ok"
        answer.release()
    assert len(calls) == 1


def test_one_header_asked_for_is_what_reading_every_line_gives() -> None:
    """A header looked up alone, before the others are read, is the whole reading's value: the
    first of a repeated name, any case, an absent one, one followed by a folded line."""
    from gateway.upstream.head import Headers, header_lines

    rng = random.Random(3)
    names = [b"X-Prompt-Tokens", b"x-prompt-tokens", b"Content-Type", b"X-Prompt-Tokens-Extra", b"Date"]
    values = [b"11", b" 12 ", b"", b"a:b", b"\t7"]
    for _ in range(5_000):
        lines = [b"HTTP/1.1 200 OK"]
        for _ in range(rng.randint(0, 5)):
            if rng.random() < 0.15:
                lines.append(rng.choice([b" folded", b"\tmore"]))
            else:
                lines.append(rng.choice(names) + b":" + rng.choice(values))
        head = b"\r\n".join(lines) + b"\r\n\r\n"
        whole = header_lines(head)
        for name in ("x-prompt-tokens", "X-PROMPT-TOKENS", "date", "server"):
            assert Headers(head).get(name) == whole.get(name.lower()), head
