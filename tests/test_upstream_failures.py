"""What each way a backend can fail becomes, for the client, the operator and the process: an
error in the gateway's own words (never the backend's raw bytes), the upstream class that says
what happened (metrics and access line), one WARNING with the cause, and nothing of the request
kept once the client has its answer. Backends are raw servers scripted byte by byte."""

import asyncio
import gc
import gzip
import logging
import os
import types
from typing import Any

import pytest

import gateway
from gateway import jsonutil
from gateway.app import ANSWERS
from tests.conftest import one_route
from tests.fixtures.openai.wire import load, raw
from tests.support import Handler, Peer, Server, answering, closed_port_url, once

PROMPT = "a long prompt " * 75_000  # about 1 MiB
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def answer(status: bytes, body: bytes = b'{"error": {"message": "no"}}', head: bytes = b"") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s" % (
        status,
        head,
        len(body),
        body,
    )


def chat_answer(text: str) -> bytes:
    out = load("chat_response.json")
    out["choices"][0]["message"]["content"] = text
    return jsonutil.dumps(out)


def before_the_body(reply: bytes) -> Handler:
    """Answers as soon as the request's head is in, without reading its body, and closes."""

    async def handle(peer: Peer) -> None:
        await peer.reader.readuntil(b"\r\n\r\n")
        await peer.send(reply)

    return handle


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def config(
    urls: list[str], backend: str = "openai", limits: dict[str, int] | None = None, **conf: Any
) -> dict[str, Any]:
    cfg = one_route("openai", backend, urls[0], retry_backoff_s=0, **conf)
    if len(urls) > 1:
        del cfg["backends"]["up"]["url"]
        cfg["backends"]["up"]["urls"] = urls
    if limits:
        cfg["limits"] = limits
    return cfg


async def metrics(gw: Any) -> str:
    return str(await (await gw.get("/metrics")).text())


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gateway" and r.levelno == logging.WARNING]


# ---- nothing kept -------------------------------------------------------------------------------

ERROR = b'data: {"error": {"message": "engine died"}}\n\n'
SOME_EVENTS = [chunk(f + b"\n\n") for f in raw("chat_stream.sse").split(b"\n\n")[:2]]
# How each case's backend fails, and how many replicas fail it in turn (None: nothing listens).
FAILING: dict[str, tuple[Handler | None, int]] = {
    "refused": (None, 1),
    "refused-by-each-replica": (None, 2),
    "4xx": (answering(answer(b"400 Bad Request")), 1),
    "5xx": (answering(answer(b"500 Internal Server Error")), 1),
    "503-from-each-replica": (answering(answer(b"503 Service Unavailable")), 2),
    "413-before-the-body": (before_the_body(answer(b"413 Too Large", head=b"Connection: close\r\n")), 1),
    "closed-mid-answer": (once(SSE, *SOME_EVENTS, hold=False), 1),
    # Good events and an error in one read: the error is held back until they went out.
    "error-event-mid-answer": (
        answering(
            SSE + chunk(b"\n\n".join(raw("chat_stream.sse").split(b"\n\n")[:2]) + b"\n\n" + ERROR) + b"0\r\n\r\n"
        ),
        1,
    ),
}
GATEWAY = os.path.dirname(gateway.__file__)


def ours(o: object) -> bool:
    """Whether a piece of garbage is the gateway's: its frames, their tracebacks, its objects."""
    if isinstance(o, types.TracebackType):
        o = o.tb_frame
    if isinstance(o, types.CoroutineType):
        return o.cr_code.co_filename.startswith(GATEWAY)
    if isinstance(o, types.FrameType):
        return o.f_code.co_filename.startswith(GATEWAY)
    return type(o).__module__.startswith("gateway.")


@pytest.mark.parametrize("how", ["one-part", "fanned-out", "messages-client"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("case", sorted(FAILING))
async def test_a_failed_request_leaves_nothing_for_the_collector(make_gateway, case, stream, how):
    """A failed request's error, connection and body are freed when the client has its answer:
    none is left in a reference cycle (an error held by a frame it went up through, a connection
    holding its fault, a stream's silence timer) for the collector, whose next pass may be
    thousands of requests away."""
    handler, replicas = FAILING[case]
    async with Server(handler or answering()) as srv:
        urls = [srv.url if handler else closed_port_url() for _ in range(replicas)]
        if how == "fanned-out":  # TGI generates one choice a request: n=3 is three upstream requests
            gw = await make_gateway(config(urls, "tgi", retries=replicas - 1))
            path, body = "/v1/completions", {"model": "m", "prompt": PROMPT, "n": 3, "stream": stream}
        elif how == "messages-client":  # an Anthropic client: its stream is read with a limit on silence
            cfg = config(urls, retries=replicas - 1)
            cfg["routes"][0]["dialect"] = "anthropic"
            gw = await make_gateway(cfg)
            messages = [{"role": "user", "content": PROMPT}]
            path, body = "/v1/messages", {"model": "m", "max_tokens": 8, "messages": messages, "stream": stream}
        else:
            gw = await make_gateway(config(urls, retries=replicas - 1))
            path, body = "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": PROMPT}]}
            body["stream"] = stream
        await (await gw.post(path, json=body)).read()  # what is made once, made
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            resp = await gw.post(path, json=body)
            await resp.read()
            gc.collect()
            left = sorted({f"{type(o).__name__} {getattr(o, 'f_code', '')}" for o in gc.garbage if ours(o)})
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert resp.status >= 400 or (stream and case.endswith("mid-answer"))
    assert left == [], "\n".join(left)


# ---- what the client gets, what the metrics and the log say --------------------------------------

BAD_ANSWERS = {
    "101-with-upgrade": (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        "switched protocols (101) though the gateway asked for no upgrade",
        "protocol",
        "",
    ),
    "101-bare": (
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        "switched protocols (101) though the gateway asked for no upgrade",
        "protocol",
        "",
    ),
    "gzip-cut-short": (
        answer(b"200 OK", gzip.compress(chat_answer("hello " * 1000))[:-6], b"Content-Encoding: gzip\r\n"),
        "sent a gzip body that stops short of its end",
        "protocol",
        "",
    ),
    "brotli": (
        answer(b"200 OK", b"\x0b\x02\x80hi\x03", b"Content-Encoding: br\r\n"),
        "answered in a content coding the gateway does not decode",
        "protocol",
        "Content-Encoding: 'br'",
    ),
    "closed-without-answering": (b"", "closed the connection without answering", "closed", ""),
    "closed-mid-body": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b'{"id": "x", ',
        "closed the connection in the middle of its answer",
        "closed",
        "",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ANSWERS))
async def test_a_bad_answer_is_a_502_that_says_what_happened_and_one_warning(make_gateway, caplog, case):
    reply, what, cls, detail = BAD_ANSWERS[case]
    async with Server(once(*[reply] if reply else [], hold=False)) as srv:
        gw = await make_gateway(config([srv.url], retries=2))
        resp = await gw.post("/v1/chat/completions", json=CHAT)
        assert resp.status == 502
        assert (await resp.json())["error"]["message"] == f"backend 'up' {what}"
        assert f'gateway_upstream_errors_total{{backend="up",error="{cls}",route="r"}} 1.0' in await metrics(gw)
    assert srv.accepts == 1  # it had the request: not sent again
    [warning] = warnings(caplog)
    assert warning.startswith(f"backend up: replica 0 ({srv.url}) {what}") and detail in warning
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_stream_answered_with_no_event_stream_is_a_502_without_the_backends_bytes(make_gateway, caplog):
    page = b"<html><body>Sign in to the proxy at 10.1.2.3</body></html>\n"
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (len(page), page)
    async with Server(answering(reply)) as srv:
        gw = await make_gateway(config([srv.url]))
        resp = await gw.post("/v1/chat/completions", json={**CHAT, "stream": True})
        assert resp.status == 502
        message = (await resp.json())["error"]["message"]
    assert message == "backend answered with something other than an event stream"
    [warning] = warnings(caplog)
    assert "Sign in to the proxy" in warning


async def test_a_304_is_not_called_a_redirect(make_gateway):
    async with Server(answering(b'HTTP/1.1 304 Not Modified\r\nETag: "x"\r\n\r\n')) as srv:
        gw = await make_gateway(config([srv.url]))
        resp = await gw.post("/v1/chat/completions", json=CHAT)
        assert resp.status == 502
        message = (await resp.json())["error"]["message"]
    assert message == "backend 'up' answered 304 Not Modified to a request that was not conditional"


# ---- time ---------------------------------------------------------------------------------------


async def dribbling(peer: Peer) -> None:
    """A head a byte at a time, each well within the gap after the one before, that never ends."""
    await peer.request()
    head = b"HTTP/1.1 200 OK\r\n"
    while True:
        for byte in head:
            peer.writer.write(bytes([byte]))
            await peer.writer.drain()
            await asyncio.sleep(0.03)
        head = b"X-Slow: a\r\n"


@pytest.mark.parametrize(
    ("stream", "timeouts"),
    [(True, {"timeout_s": 0.3}), (True, {"first_byte_timeout_s": 0.3}), (False, {"first_byte_timeout_s": 0.3})],
    ids=["stream-timeout_s", "stream-first_byte", "whole-first_byte"],
)
async def test_a_head_dribbled_byte_by_byte_is_a_504_at_its_deadline(make_gateway, stream, timeouts):
    """The head as a whole must come within first_byte_timeout_s (else timeout_s): a byte now and
    then does not keep the wait going."""
    async with Server(dribbling) as srv:
        gw = await make_gateway(config([srv.url], **{"timeout_s": 30, **timeouts}))
        resp = await gw.post("/v1/chat/completions", json={**CHAT, "stream": stream})
        assert resp.status == 504
        assert (await resp.json())["error"]["message"] == "backend 'up' did not answer within 0.3s"
        assert 'gateway_upstream_errors_total{backend="up",error="timeout",route="r"} 1.0' in await metrics(gw)


# ---- the gateway's own limits -------------------------------------------------------------------


async def test_no_free_connection_is_the_gateways_503_and_no_replicas_fault(make_gateway, caplog):
    """Every connection the backend may have is in use past the head's wait: the gateway is at its
    own limit. The client gets a 503 to come back, no replica is blamed (none is ejected, though
    one failure would do it), and no upstream error is counted."""
    go = asyncio.Event()

    async def handle(peer: Peer) -> None:
        while await peer.request():
            reply = answer(b"200 OK", chat_answer("ok"))
            await peer.send(reply[:-10])  # the head in time, the body when the test says
            await go.wait()
            await peer.send(reply[-10:])

    caplog.set_level(logging.INFO)
    async with Server(handle) as srv:
        gw = await make_gateway(
            config([srv.url, srv.url], max_connections=1, first_byte_timeout_s=1, eject_after=1, retries=1)
        )
        held = asyncio.create_task(gw.post("/v1/chat/completions", json=CHAT))
        while not srv.requests:
            await asyncio.sleep(0.01)
        resp = await gw.post("/v1/chat/completions", json=CHAT)
        assert (resp.status, resp.headers.get("Retry-After")) == (503, "1")
        go.set()
        assert (await held).status == 200
        assert (await gw.post("/v1/chat/completions", json=CHAT)).status == 200
        seen = await metrics(gw)
    assert "gateway_upstream_errors_total{" not in seen
    assert 'gateway_backend_replica_up{backend="up",replica="0"} 1.0' in seen
    assert 'gateway_backend_replica_up{backend="up",replica="1"} 1.0' in seen
    access = [r.access for r in caplog.records if r.name == "gateway.access"]  # type: ignore[attr-defined]
    assert [(a["status"], a["upstream_error"]) for a in access] == [(503, None), (200, None), (200, None)]
    assert len(srv.requests) == 2


async def test_answers_held_at_once_are_bounded_together(make_gateway):
    """Each answer within max_answer_bytes, but together past max_buffered_answer_bytes: the one
    that would take the room past it is refused, as one over its own bound is; the other goes on."""
    mib = 1 << 20
    first = chat_answer("a" * (3 * mib + mib // 2))
    go = asyncio.Event()

    async def handle(peer: Peer) -> None:
        await peer.request()
        if peer.index == 1:  # read up to 3 MiB and more, then held back
            await peer.send(answer(b"200 OK", first)[: 3 * mib + 4096])
            await go.wait()
            await peer.send(answer(b"200 OK", first)[3 * mib + 4096 :])
        else:  # a small gzip read that decodes to 2.5 MiB
            await peer.send(
                answer(b"200 OK", gzip.compress(chat_answer("b" * (5 * mib // 2))), b"Content-Encoding: gzip\r\n")
            )
        await peer.rest()

    limits = {"max_answer_bytes": 4 * mib, "max_buffered_answer_bytes": 4 * mib}
    async with Server(handle) as srv:
        gw = await make_gateway(config([srv.url], limits=limits))
        budget = gw.app[ANSWERS]
        held = asyncio.create_task(gw.post("/v1/chat/completions", json=CHAT))
        while budget.held < 3 * mib:
            await asyncio.sleep(0.01)
        resp = await gw.post("/v1/chat/completions", json=CHAT)
        assert resp.status == 502
        assert "limits.max_buffered_answer_bytes" in (await resp.json())["error"]["message"]
        go.set()
        resp = await held
        assert resp.status == 200 and await resp.read() == first
        assert budget.held == 0
