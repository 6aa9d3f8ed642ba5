"""Around the exchange: inbound auth, /healthz, /readyz, /metrics, and the dropped-params header."""

import socket
from typing import Any

from aiohttp import web

from gateway import jsonutil
from gateway.app import BACKENDS, create_app
from gateway.codec.contract import Endpoint, PathValues
from gateway.config import Limits, parse_config
from gateway.dialects.openai.inbound import RENDER, STREAM, OpenAIInbound
from gateway.neutral import params as neutral_params
from gateway.neutral.types import Message, Request, Task
from gateway.proxy.engine import ProxyEngine
from gateway.proxy.exchange import Held, serve
from gateway.proxy.routing import Route, RouteGroup
from gateway.upstream import AnswerBudget
from tests.conftest import one_route
from tests.fixtures.openai.wire import load, raw
from tests.support import json_reply, raw_reply, sse_json, sse_reply

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


async def test_auth(upstream, make_gateway, monkeypatch):
    monkeypatch.setenv("GW_KEYS", "env-key-1, env-key-2")
    upstream.reply = raw_reply(raw("chat_response.json"))
    cfg = one_route("openai", "openai", upstream.url)
    cfg["auth"] = {"api_keys": ["k1"], "api_keys_env": "GW_KEYS"}
    gw = await make_gateway(cfg)
    unauthorized = {
        "error": {
            "message": "Missing or invalid API key",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic k1"}, {"Authorization": "k1"}):
        resp = await gw.post("/v1/chat/completions", json=CHAT, headers=headers)
        assert resp.status == 401
        assert await resp.json() == unauthorized
        resp = await gw.get("/v1/models", headers=headers)
        assert resp.status == 401
        assert await resp.json() == unauthorized
    assert upstream.requests == []
    for key in ("k1", "env-key-2"):
        resp = await gw.post("/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {key}"})
        assert resp.status == 200
        assert (await gw.get("/v1/models", headers={"Authorization": f"Bearer {key}"})).status == 200
    # The client's key is checked, never forwarded.
    assert all("authorization" not in {k.lower() for k in r.headers} for r in upstream.requests)
    # Ops endpoints stay open.
    assert (await gw.get("/healthz")).status == 200
    assert (await gw.get("/metrics")).status == 200


async def test_healthz_and_readyz(upstream, make_gateway):
    upstream.reply = json_reply(load("models_response.json"))
    gw = await make_gateway(one_route("openai", "openai", upstream.url, headers={"Authorization": "Bearer up"}))
    resp = await gw.get("/healthz")
    assert resp.status == 200
    assert await resp.json() == {"status": "ok"}
    resp = await gw.get("/readyz")
    assert resp.status == 200
    body = await resp.json()
    assert body["status"] == "ready"
    assert body["backends"]["up"]["ready"] is True
    assert upstream.last.method == "GET"
    assert upstream.last.path == "/v1/models"
    assert {k.lower(): v for k, v in upstream.last.headers.items()}["authorization"] == "Bearer up"


async def test_readyz_503_when_backend_unreachable(make_gateway):
    gw = await make_gateway(one_route("openai", "openai", closed_port_url()))
    resp = await gw.get("/readyz")
    assert resp.status == 503
    body = await resp.json()
    assert body["status"] == "not_ready"
    assert body["backends"]["up"]["ready"] is False
    assert body["backends"]["up"]["replicas"][0]["ready"] is False


async def test_readyz_503_when_backend_answers_error(upstream, make_gateway):
    upstream.reply = json_reply({"error": "down"}, status=503)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    assert (await gw.get("/readyz")).status == 503


async def test_metrics_after_requests(upstream, make_gateway):
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    upstream.reply = raw_reply(raw("chat_response.json"))
    assert (await gw.post("/v1/chat/completions", json=CHAT)).status == 200
    upstream.reply = sse_reply([f + b"\n\n" for f in raw("chat_stream.sse").split(b"\n\n") if f])
    resp = await gw.post("/v1/chat/completions", json={**CHAT, "stream": True})
    await resp.read()
    assert (await gw.post("/v1/chat/completions", data=b"{")).status == 400
    resp = await gw.get("/metrics")
    assert resp.status == 200
    text = await resp.text()
    labels = 'backend="up",inbound="openai",outbound="openai",route="r"'
    assert f'gateway_requests_total{{{labels},status="200"}} 2.0' in text
    assert f'gateway_requests_total{{{labels},status="400"}} 1.0' in text
    # Tokens come from the upstream's usage: 19+9 prompt, 10+4 completion.
    assert 'gateway_tokens_total{backend="up",kind="prompt",route="r"} 28.0' in text
    assert 'gateway_tokens_total{backend="up",kind="completion",route="r"} 14.0' in text
    assert 'gateway_time_to_first_token_seconds_count{backend="up",route="r"} 1.0' in text
    assert 'gateway_request_duration_seconds_count{backend="up",route="r"} 2.0' in text
    assert 'gateway_upstream_duration_seconds_count{backend="up",route="r"} 2.0' in text


async def test_metrics_on_custom_path(upstream, make_gateway):
    cfg = one_route("openai", "openai", upstream.url)
    cfg["metrics"] = {"path": "/internal/prom"}
    gw = await make_gateway(cfg)
    assert (await gw.get("/internal/prom")).status == 200
    assert (await gw.get("/metrics")).status == 404


def foreign_parse(body: bytes, path: PathValues) -> Request:
    """A stand-in for a non-OpenAI inbound dialect: its neutral request carries vendor hints."""
    data = jsonutil.loads(body)
    # Neutral values: lists are tuples.
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in data["params"].items()}
    return Request(
        task=Task.CHAT,
        wire="foreign",
        model=data["model"],
        messages=[Message("user", data["prompt"])],
        stream=bool(data.get("stream")),
        params=neutral_params.make(values),
    )


ANSWERS = AnswerBudget(Limits().max_buffered_answer_bytes)


async def foreign_gateway(aiohttp_client: Any, url: str, extensions: str = "none") -> Any:
    app = create_app(parse_config(one_route("openai", "openai", url, options={"extensions": extensions})))
    b = app[BACKENDS]["up"]
    group = RouteGroup(
        "foreign", "", [Route("f", "foreign", "", None, b, ProxyEngine(b, Limits().max_answer_bytes, ANSWERS))]
    )
    ep = Endpoint(foreign_parse, RENDER, STREAM)

    async def handle(request: web.Request) -> web.StreamResponse:
        return await serve(request, ep, group, OpenAIInbound())

    app.router.add_post("/foreign", handle)
    return await aiohttp_client(app)


async def test_dropped_params_header_on_translated_route(upstream, aiohttp_client):
    gw = await foreign_gateway(aiohttp_client, upstream.url)
    upstream.reply = raw_reply(raw("chat_response.json"))
    body = {"model": "m", "prompt": "hi", "params": {"top_k": 5, "repetition_penalty": 1.1, "max_tokens": 9}}
    resp = await gw.post("/foreign", json=body)
    assert resp.status == 200
    assert resp.headers["X-Gateway-Dropped-Params"] == "repetition_penalty,top_k"
    assert upstream.last.json == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 9,
    }
    out = await resp.json()
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "Hello! How can I assist you today?"}
    assert out["usage"]["total_tokens"] == 29

    # Streamed: the header is on the stream response too, and the chunks are re-rendered.
    upstream.reply = sse_reply([f + b"\n\n" for f in raw("chat_stream.sse").split(b"\n\n") if f])
    resp = await gw.post("/foreign", json={**body, "stream": True})
    assert resp.status == 200
    assert resp.headers["X-Gateway-Dropped-Params"] == "repetition_penalty,top_k"
    events = sse_json(await resp.read())
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    rid = resp.headers["X-Request-Id"]
    assert {(c["id"], c["object"], c["model"], c["created"]) for c in chunks} == {
        ("chatcmpl-" + rid, "chat.completion.chunk", "m", chunks[0]["created"])
    }
    assert [c["choices"] for c in chunks] == [
        [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}],
        [{"index": 0, "delta": {"content": "Hello"}, "logprobs": None, "finish_reason": None}],
        [{"index": 0, "delta": {"content": ", w\u00f6rld \U0001f44b"}, "logprobs": None, "finish_reason": None}],
        [{"index": 0, "delta": {"content": "!"}, "logprobs": None, "finish_reason": None}],
        [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}],
    ]
    assert upstream.last.json["stream_options"] == {"include_usage": True}

    # A vLLM-style backend takes them: nothing dropped, no header.
    gw = await foreign_gateway(aiohttp_client, upstream.url, "vllm")
    upstream.reply = raw_reply(raw("chat_response.json"))
    resp = await gw.post("/foreign", json=body)
    assert resp.status == 200
    assert "X-Gateway-Dropped-Params" not in resp.headers
    assert upstream.last.json["top_k"] == 5
    assert upstream.last.json["max_tokens"] == 9


async def test_refused_param_on_translated_route(upstream, aiohttp_client):
    gw = await foreign_gateway(aiohttp_client, upstream.url)
    body = {"model": "m", "prompt": "hi", "params": {"stop_token_ids": [2]}}
    resp = await gw.post("/foreign", json=body)
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["code"] == "unsupported_parameter"
    assert err["param"] == "stop_token_ids"
    assert upstream.requests == []


async def test_dropped_params_header_from_a_real_tgi_client(upstream, make_gateway):
    # A TGI client asks for top_k and repetition_penalty; the public OpenAI API has neither.
    upstream.reply = raw_reply(raw("completion_response.json"))
    gw = await make_gateway(one_route("tgi", "openai", upstream.url, model="up"))
    body = {"inputs": "hi", "parameters": {"top_k": 5, "repetition_penalty": 1.1, "max_new_tokens": 9}}
    resp = await gw.post("/generate", json=body)
    assert resp.status == 200
    assert resp.headers["X-Gateway-Dropped-Params"] == "repetition_penalty,top_k"
    assert upstream.last.path == "/v1/completions"
    assert upstream.last.json == {"model": "up", "prompt": "hi", "max_tokens": 9}
    assert (await resp.json())["generated_text"] == "\n\nThis is indeed a test"


def test_what_a_request_held_is_let_go_in_reverse_each_part_whatever_another_does(caplog: Any) -> None:
    """A request's parts (its slot, its gauges, its record) are let go last taken first; one that
    fails to let go is logged, and the others are let go all the same, once."""
    gone: list[str] = []

    def fails() -> None:
        gone.append("fails")
        raise RuntimeError("a bug")

    held = Held()
    held.callback(gone.append, "record")
    held.callback(fails)
    held.callback(gone.append, "slot")
    held.release()
    held.release()  # a second release lets go of nothing again
    assert gone == ["slot", "fails", "record"]
    assert "letting go of what a request held failed" in caplog.text
