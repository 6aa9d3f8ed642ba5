"""Metrics after real traffic: exact counts and labels of every family in /metrics, parsed.

The traffic mix goes through a running gateway to a fake upstream answering with the OpenAI
fixtures: two whole answers, two streams, one upstream 502 and one client that leaves mid-stream.
"""

import asyncio
import os
import re
import signal
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config import parse_config
from gateway.metrics import FLUSH_S, MULTIPROC_ENV, Metrics
from gateway.neutral.events import TextDelta, UsageEvent
from gateway.neutral.types import Usage
from gateway.proxy.exchange import Exchange
from tests.conftest import one_route
from tests.support import FakeUpstream, Recorded, json_reply, sse_reply, start_workers

FIX = Path(__file__).parent / "fixtures" / "openai"
CHAT_RESPONSE = (FIX / "chat_response.json").read_bytes()  # usage 19 prompt + 10 completion
STREAM_FRAMES = [f + b"\n\n" for f in (FIX / "chat_stream.sse").read_bytes().split(b"\n\n") if f.strip()]
# The fixture stream: a role chunk, three content chunks, a finish chunk, usage 9 + 4, [DONE].
STREAM_TOKEN_CHUNKS = 3
FAMILIES = {
    "gateway_requests": "counter",
    "gateway_request_duration_seconds": "histogram",
    "gateway_time_to_first_token_seconds": "histogram",
    "gateway_inter_token_latency_seconds": "histogram",
    "gateway_upstream_duration_seconds": "histogram",
    "gateway_overhead_seconds": "histogram",
    "gateway_tokens": "counter",
    "gateway_in_flight_requests": "gauge",
    "gateway_upstream_errors": "counter",
    "gateway_client_disconnects": "counter",
}


def scripted(upstream: FakeUpstream) -> None:
    """Answer by the user's message: `fail` -> 502, `leave` -> a stream that never ends."""
    bad = json_reply({"error": {"message": "engine crashed", "type": "server_error"}}, status=502)
    # Paced, so that token chunks normally arrive in separate reads (see the ITL bound below).
    stream = sse_reply(STREAM_FRAMES, delay=0.05)
    hanging = sse_reply(STREAM_FRAMES[:3], hang=True, upstream=upstream)

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        body = rec.json
        said = body["messages"][-1]["content"]
        if said == "fail":
            return await bad(request, rec)
        if said == "leave":
            return await hanging(request, rec)
        if body.get("stream"):
            return await stream(request, rec)
        return web.Response(body=CHAT_RESPONSE, content_type="application/json")

    upstream.reply = reply


def chat(text: str, stream: bool = False) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "stream": stream}


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(all_: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return all_.get((name, frozenset(labels.items())), 0.0)


async def run_mix(upstream: FakeUpstream, client: Any) -> None:
    scripted(upstream)
    for _ in range(2):
        r = await client.post("/v1/chat/completions", json=chat("hi"))
        assert r.status == 200
        await r.read()
    for _ in range(2):
        r = await client.post("/v1/chat/completions", json=chat("hi", stream=True))
        assert r.status == 200
        assert (await r.read()).endswith(b"data: [DONE]\n\n")
    r = await client.post("/v1/chat/completions", json=chat("fail"))
    assert r.status == 502
    await r.read()
    # Read until the first token arrived, then leave: the gateway must cut the backend too.
    r = await client.post("/v1/chat/completions", json=chat("leave", stream=True))
    assert r.status == 200
    seen = b""
    while b"Hello" not in seen:
        seen += await r.content.readany()
    r.close()
    await asyncio.wait_for(upstream.disconnected.wait(), 10)


async def gateway_metrics_text(client: Any) -> str:
    # The disconnect is recorded when the cancelled handler unwinds; wait until it has.
    for _ in range(200):
        text = await (await client.get("/metrics")).text()
        if 'status="499"' in text:
            return text
        await asyncio.sleep(0.02)
    raise AssertionError("the disconnected request was never recorded")


async def test_metrics_after_a_traffic_mix(upstream, aiohttp_client):
    client = await aiohttp_client(create_app(parse_config(one_route("openai", "openai", upstream.url))))
    await run_mix(upstream, client)
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    text = await gateway_metrics_text(client)

    types = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert {k: types.get(k) for k in FAMILIES} == FAMILIES
    s = samples(text)
    rb = {"route": "r", "backend": "up"}
    dial = {"inbound": "openai", "outbound": "openai"}
    assert value(s, "gateway_requests_total", **rb, **dial, status="200") == 4
    assert value(s, "gateway_requests_total", **rb, **dial, status="502") == 1
    assert value(s, "gateway_requests_total", **rb, **dial, status="499") == 1
    total = sum(v for (n, _), v in s.items() if n == "gateway_requests_total")
    assert total == 6
    for name in ("gateway_request_duration_seconds", "gateway_upstream_duration_seconds", "gateway_overhead_seconds"):
        assert value(s, f"{name}_count", **rb) == 6, name
        assert value(s, f"{name}_bucket", **rb, le="+Inf") == 6, name
        assert value(s, f"{name}_sum", **rb) > 0, name
    # First token: the two full streams and the one the client left, not the whole answers.
    assert value(s, "gateway_time_to_first_token_seconds_count", **rb) == 3
    # Gaps between token chunks: at most two per full stream and one in the left stream; chunks
    # that reach the gateway in one read count as one, so only the bound is exact.
    itl = value(s, "gateway_inter_token_latency_seconds_count", **rb)
    assert 0 < itl <= 2 * (STREAM_TOKEN_CHUNKS - 1) + 1
    assert value(s, "gateway_inter_token_latency_seconds_bucket", **rb, le="+Inf") == itl
    # Usage: 19 + 10 per whole answer, 9 + 4 per full stream; the failed and left ones had none.
    assert value(s, "gateway_tokens_total", **rb, kind="prompt") == 2 * 19 + 2 * 9
    assert value(s, "gateway_tokens_total", **rb, kind="completion") == 2 * 10 + 2 * 4
    assert value(s, "gateway_upstream_errors_total", **rb, error="status_5xx") == 1
    assert sum(v for (n, _), v in s.items() if n == "gateway_upstream_errors_total") == 1
    assert value(s, "gateway_client_disconnects_total", route="r", phase="streaming") == 1
    assert sum(v for (n, _), v in s.items() if n == "gateway_client_disconnects_total") == 1
    assert value(s, "gateway_in_flight_requests", route="r") == 0
    # Bounded labels: nothing the client sent (model names, paths) became a label value.
    labels = {v for (_, ls), _ in s.items() for _, v in ls}
    assert not {"m", "/v1/chat/completions", "hi", "gpt-4o-mini"} & labels


async def test_rejected_request_counts_against_the_route_without_client_labels(upstream, make_gateway):
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    r = await gw.post("/v1/chat/completions", data=b"{not json")
    assert r.status == 400
    s = samples(await (await gw.get("/metrics")).text())
    got = {ls: v for (n, ls), v in s.items() if n == "gateway_requests_total"}
    labels = {"route": "r", "backend": "up", "inbound": "openai", "outbound": "openai", "status": "400"}
    assert got == {frozenset(labels.items()): 1.0}
    assert upstream.requests == []


async def test_disconnect_before_first_token(upstream, aiohttp_client):
    # The backend accepts the stream but sends nothing that carries a token before the client leaves.
    upstream.reply = sse_reply([STREAM_FRAMES[0]], hang=True, upstream=upstream)
    client = await aiohttp_client(create_app(parse_config(one_route("openai", "openai", upstream.url))))
    r = await client.post("/v1/chat/completions", json=chat("hi", stream=True))
    assert r.status == 200
    await r.content.readany()
    r.close()
    await asyncio.wait_for(upstream.disconnected.wait(), 10)
    text = await gateway_metrics_text(client)
    s = samples(text)
    assert value(s, "gateway_client_disconnects_total", route="r", phase="before_first_token") == 1
    assert value(s, "gateway_client_disconnects_total", route="r", phase="streaming") == 0
    assert value(s, "gateway_time_to_first_token_seconds_count", route="r", backend="up") == 0


async def test_connect_error_class(make_gateway, unused_tcp_port):
    gw = await make_gateway(one_route("openai", "openai", f"http://127.0.0.1:{unused_tcp_port}"))
    r = await gw.post("/v1/chat/completions", json=chat("hi"))
    assert r.status == 502
    s = samples(await (await gw.get("/metrics")).text())
    assert value(s, "gateway_upstream_errors_total", route="r", backend="up", error="connect") == 1


def test_exchange_observes_each_token_gap_into_the_route_child():
    m = Metrics()
    rm = m.route("r", "b")
    ex = Exchange(0.0, metrics=rm)
    ex.observe([TextDelta("a", 0)])
    ex.observe([])
    ex.observe([TextDelta("b", 0), TextDelta("c", 0)])
    ex.observe([UsageEvent(Usage(3, 2))])
    ex.observe([TextDelta("d", 0)])
    s = samples(m.exposition().decode())
    # Three token-bearing batches after the first: two gaps (a batch of two tokens is one chunk).
    assert value(s, "gateway_inter_token_latency_seconds_count", route="r", backend="b") == 2
    assert ex.first_token > 0
    assert (ex.prompt_tokens, ex.completion_tokens) == (3, 2)


async def test_metrics_on_their_own_listener(upstream, aiohttp_client, unused_tcp_port):
    conf = one_route("openai", "openai", upstream.url)
    conf["metrics"] = {"port": unused_tcp_port, "path": "/prom"}
    conf["listen"] = {"host": "127.0.0.1"}
    upstream.reply = lambda request, rec: web_response(CHAT_RESPONSE)
    client = await aiohttp_client(create_app(parse_config(conf)))
    assert (await client.post("/v1/chat/completions", json=chat("hi"))).status == 200
    # Not on the main listener...
    assert (await client.get("/prom")).status == 404
    assert (await client.get("/metrics")).status == 404
    # ...but on its own port.
    async with client.session.get(f"http://127.0.0.1:{unused_tcp_port}/prom") as r:
        assert r.status == 200
        s = samples(await r.text())
    labels = {"route": "r", "backend": "up", "inbound": "openai", "outbound": "openai", "status": "200"}
    assert value(s, "gateway_requests_total", **labels) == 1


async def web_response(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")


async def test_worker_processes_aggregate_their_metrics(tmp_path, unused_tcp_port):
    """`gateway serve --workers 2`: two processes on one port; any scrape sums both."""
    config = tmp_path / "gw.yaml"
    config.write_text(
        "backends:\n  sim: {dialect: openai, simulate: true, model: sim-model}\n"
        "routes:\n  - {name: chat, dialect: openai, backend: sim}\n"
    )
    env = {k: v for k, v in os.environ.items() if k != MULTIPROC_ENV}
    port = unused_tcp_port
    proc, banner = await start_workers(config, port, env)
    try:
        assert f"listening on http://127.0.0.1:{port} (2 workers".encode() in banner
        metrics_dir = re.search(rb"metrics in (\S+)\)", banner).group(1).decode()  # type: ignore[union-attr]
        n, streams = 24, 8
        base = f"http://127.0.0.1:{port}"
        # A fresh connection per request, so the kernel spreads them over the workers.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
            for i in range(n):
                async with session.post(f"{base}/v1/chat/completions", json=chat("hi", stream=i < streams)) as r:
                    assert r.status == 200
                    await r.read()
            # A worker's figures reach the shared folder within FLUSH_S of being recorded (the
            # scraped worker's own at once): the scrape is repeated until the other's are there.
            rb = {"route": "chat", "backend": "sim"}
            labels = {**rb, "inbound": "openai", "outbound": "openai", "status": "200"}
            for _ in range(100):
                async with session.get(f"{base}/metrics") as r:
                    s = samples(await r.text())
                if value(s, "gateway_requests_total", **labels) == n:
                    break
                await asyncio.sleep(FLUSH_S)
        assert value(s, "gateway_requests_total", **labels) == n
        assert sum(v for (name, _), v in s.items() if name == "gateway_requests_total") == n
        assert value(s, "gateway_request_duration_seconds_count", **rb) == n
        assert value(s, "gateway_time_to_first_token_seconds_count", **rb) == streams
        assert value(s, "gateway_in_flight_requests", route="chat") == 0
        assert os.path.isdir(metrics_dir)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)  # as SIGTERM, without the drain delay
        code = await asyncio.wait_for(proc.wait(), 30)
    assert code == 0
    assert not os.path.exists(metrics_dir)  # the parent removed its temporary folder


def test_recorded_observations_reach_the_same_values_as_observing_each():
    """The request path adds to plain counts that a flush adds to prometheus-client's values; the
    exposition is the one observing each value directly gives, bucket bounds included."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from gateway.metrics import DURATION_BUCKETS, ITL_BUCKETS

    values = [0.0, 0.004, 0.005, 0.0051, 0.25, 1, 600, 601, 1e9, 0.025]
    gaps = [0.0009, 0.001, 0.3, 7.0]
    m = Metrics()
    rm = m.route("r", "b")
    rm.started()
    for v in values:
        rm.duration.observe(v)
    for g in gaps:
        rm.gap(g)
    rm.prompt_tokens += 5
    m.count_request("r", "b", "openai", "openai", "200")
    m.count_request("r", "b", "openai", "openai", "200")
    got = samples(m.exposition().decode())
    ref = CollectorRegistry()
    duration = Histogram("d", "", ["route", "backend"], buckets=DURATION_BUCKETS, registry=ref).labels("r", "b")
    itl = Histogram("i", "", ["route", "backend"], buckets=ITL_BUCKETS, registry=ref).labels("r", "b")
    for v in values:
        duration.observe(v)
    for g in gaps:
        itl.observe(g)
    want = samples(generate_latest(ref).decode())
    rb = {"route": "r", "backend": "b"}
    for mine, theirs in (("gateway_request_duration_seconds", "d"), ("gateway_inter_token_latency_seconds", "i")):
        for (name, labels), v in want.items():
            if name.startswith(theirs + "_") and not name.endswith("_created"):
                assert value(got, mine + name[len(theirs) :], **dict(labels)) == v, (name, labels)
    assert value(got, "gateway_request_duration_seconds_count", **rb) == len(values)
    assert value(got, "gateway_tokens_total", kind="prompt", **rb) == 5
    assert value(got, "gateway_in_flight_requests", route="r") == 1
    labels = {**rb, "inbound": "openai", "outbound": "openai", "status": "200"}
    assert value(got, "gateway_requests_total", **labels) == 2
    # Flushed once: a second scrape shows the same, and what comes after adds to it.
    rm.ended()
    rm.duration.observe(0.5)
    again = samples(m.exposition().decode())
    assert value(again, "gateway_request_duration_seconds_count", **rb) == len(values) + 1
    assert value(again, "gateway_in_flight_requests", route="r") == 0
