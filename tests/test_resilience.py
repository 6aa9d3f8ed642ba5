"""Failover before the first byte, ejection of failing replicas, backpressure passed on, a
backend's own admission queue, and deadlines: each against faulty replicas on loopback."""

import asyncio
import logging
import socket
from typing import Any

import pytest
from aiohttp import web

from tests.support import FakeUpstream, Recorded, json_reply, sse_json, sse_reply

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ANSWER = {
    "id": "c",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
}
CHUNKS = [
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}\n\n',
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]


async def _reset(request: web.Request, rec: Recorded) -> web.StreamResponse:
    """Takes the whole request, then drops the connection without a byte of answer."""
    assert request.transport is not None
    request.transport.close()
    await asyncio.sleep(5)
    raise AssertionError("unreachable")


async def _hang(request: web.Request, rec: Recorded) -> web.StreamResponse:
    await asyncio.sleep(30)
    raise AssertionError("unreachable")


def _status(status: int, headers: dict[str, str] | None = None) -> Any:
    return json_reply({"error": {"message": f"replica says {status}", "type": "x"}}, status=status, headers=headers)


@pytest.fixture
def replicas(aiohttp_server: Any) -> Any:
    async def make(n: int) -> list[FakeUpstream]:
        out = []
        for _ in range(n):
            up = FakeUpstream()
            server = await aiohttp_server(up.app())
            up.url = str(server.make_url("")).rstrip("/")
            up.reply = json_reply(ANSWER)
            out.append(up)
        return out

    return make


def _refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _config(urls: list[str], dialect: str = "openai", **backend: Any) -> dict[str, Any]:
    b = {"dialect": "openai", "urls": urls, "retry_backoff_s": 0, **backend}
    return {"backends": {"up": b}, "routes": [{"name": "r", "dialect": dialect, "backend": "up"}]}


async def _statuses(gw: Any, n: int, body: dict[str, Any] = CHAT) -> list[int]:
    out = []
    for _ in range(n):
        resp = await gw.post("/v1/chat/completions", json=body)
        await resp.read()
        out.append(resp.status)
    return out


# ---- failover and ejection -------------------------------------------------------------------


async def test_a_refusing_replica_is_left_out_at_once(replicas, make_gateway, caplog):
    (alive,) = await replicas(1)
    gw = await make_gateway(_config([_refused_url(), alive.url], eject_base_s=60))
    with caplog.at_level(logging.WARNING, logger="gateway"):
        assert await _statuses(gw, 100) == [200] * 100
    tries = [r for r in caplog.records if "cannot connect to replica 0" in r.getMessage()]
    assert len(tries) == 1  # then ejected for a minute
    assert len(alive.requests) == 100


async def test_a_reset_before_headers_is_not_resent_unless_allowed(replicas, make_gateway):
    bad, alive = await replicas(2)
    bad.reply = _reset
    gw = await make_gateway(_config([bad.url, alive.url], eject_base_s=60))
    statuses = await _statuses(gw, 100)
    # The request may be generating on the replica that reset: never sent twice. Three resets
    # in a row eject it; the rest go to the other replica.
    assert statuses.count(502) == 3 and statuses.count(200) == 97
    assert len(bad.requests) == 3

    def ids(up: FakeUpstream) -> set[str]:
        return {v for r in up.requests for k, v in r.headers.items() if k.lower() == "x-request-id"}

    assert len(ids(bad)) == 3 and not ids(bad) & ids(alive)


async def test_a_reset_is_retried_where_the_operator_allows_it(replicas, make_gateway):
    bad, alive = await replicas(2)
    bad.reply = _reset
    gw = await make_gateway(_config([bad.url, alive.url], eject_base_s=60, retry_on_timeout=True))
    assert await _statuses(gw, 100) == [200] * 100
    assert len(bad.requests) == 3


async def test_a_replica_that_sends_no_headers_in_time_is_abandoned(replicas, make_gateway):
    bad, alive = await replicas(2)
    bad.reply = _hang
    config = _config([bad.url, alive.url], eject_base_s=60, first_byte_timeout_s=0.2, retry_on_timeout=True)
    gw = await make_gateway(config)
    assert await _statuses(gw, 20) == [200] * 20
    assert len(bad.requests) == 3
    # Without retry_on_timeout the client hears the timeout (the replica may be generating).
    bad2, alive2 = await replicas(2)
    bad2.reply = _hang
    gw = await make_gateway(_config([bad2.url, alive2.url], first_byte_timeout_s=0.2))
    assert sorted(set(await _statuses(gw, 4))) == [200, 504]


async def test_a_5xx_streak_ejects_and_one_trial_brings_the_replica_back(replicas, make_gateway):
    bad, alive = await replicas(2)
    bad.reply = _status(500)
    gw = await make_gateway(_config([bad.url, alive.url], eject_base_s=0.3, eject_max_s=10))
    statuses = await _statuses(gw, 20)
    assert statuses.count(500) == 3 and len(bad.requests) == 3
    await asyncio.sleep(0.35)
    # Its time is up: exactly one request tries it, and it fails again (ejected for 0.6 s now).
    statuses = await _statuses(gw, 10)
    assert statuses.count(500) == 1 and len(bad.requests) == 4
    await asyncio.sleep(0.35)
    assert await _statuses(gw, 5) == [200] * 5 and len(bad.requests) == 4  # still out
    bad.reply = json_reply(ANSWER)
    await asyncio.sleep(0.35)
    assert await _statuses(gw, 10) == [200] * 10
    assert len(bad.requests) - 4 in (5, 6)  # its trial, then round-robin again


async def test_every_replica_ejected_still_tries_the_one_that_failed_longest_ago(replicas, make_gateway):
    a, b = await replicas(2)
    a.reply = b.reply = _status(500)
    gw = await make_gateway(_config([a.url, b.url], eject_after=1, eject_base_s=60))
    assert await _statuses(gw, 2) == [500, 500]
    a.reply = json_reply(ANSWER)
    # Both are out; the request is not refused: the one that failed first is asked.
    assert await _statuses(gw, 1) == [200]


async def test_readyz_and_metrics_show_an_ejected_replica(replicas, make_gateway):
    (alive,) = await replicas(1)
    gw = await make_gateway(_config([_refused_url(), alive.url], eject_base_s=60))
    await _statuses(gw, 3)
    metrics = await (await gw.get("/metrics")).text()
    assert 'gateway_backend_replica_up{backend="up",replica="0"} 0.0' in metrics
    assert 'gateway_backend_replica_up{backend="up",replica="1"} 1.0' in metrics
    ready = await (await gw.get("/readyz")).json()
    replica = ready["backends"]["up"]["replicas"][0]
    assert replica["ejected"] is True


# ---- backpressure ----------------------------------------------------------------------------


async def test_retry_after_reaches_the_client_in_its_dialect(replicas, make_gateway):
    (up,) = await replicas(1)
    up.reply = _status(429, {"Retry-After": "7"})
    gw = await make_gateway(_config([up.url]))
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    # An OpenAI client of an OpenAI backend gets the backend's own error body.
    assert resp.status == 429 and resp.headers["Retry-After"] == "7"
    assert (await resp.json())["error"]["message"] == "replica says 429"
    gw = await make_gateway(_config([up.url], dialect="tgi"))
    resp = await gw.post("/generate", json={"inputs": "x"})
    assert resp.status == 429 and resp.headers["Retry-After"] == "7"
    assert (await resp.json())["error_type"] == "overloaded"


async def test_a_replica_that_turns_a_request_away_passes_it_to_another(replicas, make_gateway):
    busy, alive = await replicas(2)
    busy.reply = _status(503, {"Retry-After": "2"})
    gw = await make_gateway(_config([busy.url, alive.url]))
    assert await _statuses(gw, 6) == [200] * 6
    alive.reply = _status(503, {"Retry-After": "2"})
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 503 and resp.headers["Retry-After"] == "2"


async def test_the_gateways_own_overload_says_when_to_retry(replicas, make_gateway):
    (up,) = await replicas(1)
    up.reply = sse_reply(CHUNKS[:1], hang=True)
    config = _config([up.url])
    config["limits"] = {"max_concurrent_requests": 1}
    gw = await make_gateway(config)
    first = await gw.post("/v1/chat/completions", json={**CHAT, "stream": True})
    await first.content.readuntil(b"\n\n")
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 503 and resp.headers["Retry-After"] == "1"
    first.close()


# ---- a backend's own admission queue ---------------------------------------------------------


def _held(gate_open: asyncio.Event, order: list[str]) -> Any:
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        order.append(rec.json["messages"][0]["content"])
        await gate_open.wait()
        return web.json_response(ANSWER)

    return reply


async def test_queue_full_is_429_and_the_queue_goes_by_priority(replicas, make_gateway):
    (up,) = await replicas(1)
    release, order = asyncio.Event(), []
    up.reply = _held(release, order)
    gw = await make_gateway(_config([up.url], max_concurrent=1, max_queued=2, queue_timeout_s=5))

    def ask(name: str, priority: str) -> Any:
        body = {**CHAT, "messages": [{"role": "user", "content": name}]}
        return asyncio.create_task(gw.post("/v1/chat/completions", json=body, headers={"X-Gateway-Priority": priority}))

    running = ask("first", "3")
    await asyncio.sleep(0.1)
    low, high = ask("low", "5"), None
    await asyncio.sleep(0.05)
    high = ask("high", "1")
    await asyncio.sleep(0.05)
    full = await gw.post("/v1/chat/completions", json=CHAT)
    assert full.status == 429 and full.headers["Retry-After"] == "1"
    release.set()
    for t in (running, low, high):
        assert (await t).status == 200
    assert order == ["first", "high", "low"]


async def test_a_client_that_leaves_the_queue_frees_its_place(replicas, make_gateway):
    (up,) = await replicas(1)
    release, order = asyncio.Event(), []
    up.reply = _held(release, order)
    gw = await make_gateway(_config([up.url], max_concurrent=1, max_queued=1))
    running = asyncio.create_task(gw.post("/v1/chat/completions", json=CHAT))
    await asyncio.sleep(0.1)
    waiting = asyncio.create_task(gw.post("/v1/chat/completions", json=CHAT))
    await asyncio.sleep(0.1)
    waiting.cancel()  # the client goes away while queued
    await asyncio.sleep(0.1)
    third = asyncio.create_task(gw.post("/v1/chat/completions", json=CHAT))  # takes the place
    await asyncio.sleep(0.1)
    release.set()
    assert (await running).status == 200 and (await third).status == 200
    assert len(order) == 2


async def test_waiting_too_long_in_the_queue_is_429(replicas, make_gateway):
    (up,) = await replicas(1)
    release = asyncio.Event()
    up.reply = _held(release, [])
    gw = await make_gateway(_config([up.url], max_concurrent=1, queue_timeout_s=0.2))
    running = asyncio.create_task(gw.post("/v1/chat/completions", json=CHAT))
    await asyncio.sleep(0.1)
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 429 and "waited" in (await resp.json())["error"]["message"]
    release.set()
    assert (await running).status == 200


# ---- deadlines -------------------------------------------------------------------------------


async def test_max_duration_ends_a_whole_answer_and_a_stream(replicas, make_gateway):
    (up,) = await replicas(1)
    up.reply = _hang
    gw = await make_gateway(_config([up.url], max_duration_s=0.3))
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 504
    up.reply = sse_reply(CHUNKS[:1], hang=True)
    resp = await gw.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert resp.status == 200
    events = sse_json(await asyncio.wait_for(resp.read(), 5))
    assert events[0]["choices"][0]["delta"]["content"] == "ok"
    assert "time limit" in events[-2]["error"]["message"] and events[-1] == "[DONE]"


async def test_a_mindie_client_timeout_is_a_deadline(replicas, make_gateway):
    (up,) = await replicas(1)
    up.reply = _hang
    gw = await make_gateway(_config([up.url], dialect="mindie", model="m"))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    resp = await gw.post("/infer", json={"inputs": "x", "parameters": {"timeout": 1}})
    assert resp.status >= 500 and loop.time() - t0 < 3
