"""One request must not cost the gateway more than its share: bounded fan-out, slots per upstream
request, bodies JSON cannot carry, bodies that do not decode, CPU work off the event loop, and
clients that leave without a traceback in the log."""

import asyncio
import gzip
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import Gauge
from prometheus_client.parser import text_string_to_metric_families

from gateway import jsonutil
from gateway.adapters.tokenizer import Tokenizer
from gateway.metrics import watch_loop_lag
from tests.conftest import one_route
from tests.fixtures.openai.wire import raw
from tests.support import Recorded, raw_reply, sse_reply


def tgi_answer(text: str = " ok") -> bytes:
    return jsonutil.dumps(
        {"generated_text": text, "details": {"finish_reason": "length", "generated_tokens": 1, "seed": None}}
    )


@pytest.fixture
def tgi_upstream(upstream):
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.Response(body=tgi_answer(), content_type="application/json")

    upstream.reply = reply
    return upstream


async def test_an_absurd_n_is_refused_by_the_dialects_bound(tgi_upstream, make_gateway):
    gw = await make_gateway(one_route("databricks", "tgi", tgi_upstream.url))
    resp = await gw.post(
        "/serving-endpoints/x/invocations",
        data=b'{"messages":[{"role":"user","content":"hi"}],"n":10000000000000000}',
    )
    assert resp.status == 400
    assert (await resp.json())["error_code"] == "INVALID_PARAMETER_VALUE"
    assert tgi_upstream.requests == []
    assert (await gw.get("/healthz")).status == 200


async def test_prompts_times_choices_is_capped_before_anything_is_sent(tgi_upstream, make_gateway):
    gw = await make_gateway(one_route("openai", "tgi", tgi_upstream.url))
    body = {"model": "m", "prompt": [f"p{i}" for i in range(1000)], "n": 4, "max_tokens": 1}
    resp = await gw.post("/v1/completions", json=body)
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["code"] == "too_many_choices"
    assert err["message"] == (
        "This request would take 4000 upstream requests (prompts x choices) and the limit is 16; "
        "send fewer prompts or choices"
    )
    assert tgi_upstream.requests == []


async def test_the_fanout_limit_is_configurable_and_exact(tgi_upstream, make_gateway):
    cfg = one_route("databricks", "tgi", tgi_upstream.url)
    cfg["limits"] = {"max_fanout": 3}
    gw = await make_gateway(cfg)
    prompt = {"prompt": "hi", "max_tokens": 1}
    assert (await gw.post("/serving-endpoints/x/invocations", json={**prompt, "n": 4})).status == 400
    resp = await gw.post("/serving-endpoints/x/invocations", json={**prompt, "n": 3})
    assert resp.status == 200
    assert len((await resp.json())["choices"]) == 3
    assert len(tgi_upstream.requests) == 3


async def test_a_fanned_out_request_takes_a_slot_per_upstream_request(tgi_upstream, make_gateway):
    cfg = one_route("openai", "tgi", tgi_upstream.url)
    cfg["limits"] = {"max_concurrent_requests": 4}
    gw = await make_gateway(cfg)
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": ["a", "b", "c", "d", "e"], "max_tokens": 1})
    assert resp.status == 503
    assert "concurrent request limit" in (await resp.json())["error"]["message"]
    assert tgi_upstream.requests == []
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": ["a", "b", "c", "d"], "max_tokens": 1})
    assert resp.status == 200


def nested(depth: int) -> bytes:
    return b'{"model":"m","messages":[{"role":"user","content":"hi"}],"extra":' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("depth", [255, 300, 1000])
async def test_json_nested_deeper_than_can_be_forwarded_is_a_400(upstream, make_gateway, depth):
    upstream.reply = raw_reply(raw("chat_response.json"))
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    resp = await gw.post("/v1/chat/completions", data=nested(depth))
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["code"] == "invalid_json"
    assert upstream.requests == []
    # 254 levels is what can be written: forwarded.
    assert (await gw.post("/v1/chat/completions", data=nested(200))).status == 200


@pytest.mark.parametrize(
    "sent",
    [b"\x1f\x8b\x08\x00 not gzip at all", b"\x1f\x8b\x08\x00garbage", gzip.compress(b'{"model": "m"}')[:9]],
    ids=["bad-header", "cut-in-its-header", "cut-shorter"],
)
async def test_a_body_that_does_not_decode_is_a_400(upstream, make_gateway, sent):
    upstream.reply = raw_reply(raw("chat_response.json"))
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    resp = await gw.post("/v1/chat/completions", data=sent, headers=headers)
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "invalid_body"

    async def chunked() -> AsyncIterator[bytes]:
        yield sent

    resp = await gw.post("/v1/chat/completions", data=chunked(), headers=headers)
    assert (resp.status, (await resp.json())["error"]["code"]) == (400, "invalid_body")
    body = gzip.compress(jsonutil.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
    assert (await gw.post("/v1/chat/completions", data=body, headers=headers)).status == 200
    assert len(upstream.requests) == 1


async def test_large_prompts_are_tokenized_off_the_event_loop(upstream, make_gateway, tokenizer_folder, monkeypatch):
    threads: list[str] = []
    real_count = Tokenizer.count_prompt

    def spy(self: Tokenizer, text: str) -> int:
        threads.append(threading.current_thread().name)
        return real_count(self, text)

    monkeypatch.setattr(Tokenizer, "count_prompt", spy)
    upstream.reply = raw_reply(tgi_answer(), content_type="application/json")
    gw = await make_gateway(one_route("openai", "tgi", upstream.url, tokenizer=str(tokenizer_folder)))
    threads.clear()  # the counts a tokenizer's load checks itself with (once per folder and process)
    small = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    large = {"model": "m", "messages": [{"role": "user", "content": "hello world " * 2000}], "max_tokens": 1}
    assert (await gw.post("/v1/chat/completions", json=small)).status == 200
    assert (await gw.post("/v1/chat/completions", json=large)).status == 200
    assert threads[0] == threading.current_thread().name  # small: inline, a thread hop costs more
    assert threads[1].startswith("gateway-cpu")


async def test_loop_lag_gauge_shows_a_stall():
    gauge = Gauge("lag_probe_seconds", "test", registry=None)
    task = asyncio.create_task(watch_loop_lag(gauge, interval_s=0.01))
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # the loop is held, as a synchronous tokenizer run would hold it
    await asyncio.sleep(0.05)
    task.cancel()
    assert gauge._value.get() >= 0.25  # type: ignore[attr-defined]


async def test_loop_lag_is_exported(upstream, make_gateway):
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    await asyncio.sleep(0.3)
    text = await (await gw.get("/metrics")).text()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert "gateway_event_loop_lag_seconds" in names


async def test_a_client_leaving_mid_stream_is_counted_and_logged_without_a_traceback(
    upstream, make_gateway, caplog: Any
):
    caplog.set_level(logging.DEBUG)
    chunk = raw("chat_stream.sse").split(b"\n\n")[1] + b"\n\n"
    upstream.reply = sse_reply([chunk] * 3, hang=True, upstream=upstream)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    for _ in range(5):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        resp = await gw.post("/v1/chat/completions", json=body)
        await resp.content.readany()
        resp.close()
        await asyncio.wait_for(upstream.disconnected.wait(), 5)
        upstream.disconnected.clear()
    await asyncio.sleep(0.1)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not any(r.exc_info or r.exc_text for r in caplog.records)
    text = await (await gw.get("/metrics")).text()
    assert 'gateway_client_disconnects_total{phase="streaming",route="r"} 5.0' in text
