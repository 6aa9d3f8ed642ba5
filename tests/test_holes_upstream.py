"""What a misbehaving backend, or a client steering one, must not get out of the gateway: redirects
followed with the prompt and credentials, cookies replayed across clients, the backend's secrets
echoed to clients, and client-chosen names walking the backend's URL space."""

from typing import Any

import pytest
from aiohttp import web

from gateway.config import ConfigError, parse_config
from tests.conftest import one_route
from tests.fixtures.openai.wire import raw
from tests.support import FakeUpstream, json_reply, raw_reply

CHAT = {"model": "m", "messages": [{"role": "user", "content": "a secret prompt"}]}


@pytest.fixture
async def elsewhere(aiohttp_server: Any) -> FakeUpstream:
    """A second host, where a redirect would send the request."""
    up = FakeUpstream()
    up.reply = raw_reply(raw("chat_response.json"))
    server = await aiohttp_server(up.app())
    up.url = str(server.make_url("")).rstrip("/")
    return up


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("stream", [False, True])
async def test_redirects_are_never_followed(upstream, elsewhere, make_gateway, status, stream):
    async def reply(request: web.Request, rec: Any) -> web.StreamResponse:
        return web.Response(status=status, headers={"Location": elsewhere.url + "/v1/chat/completions"})

    upstream.reply = reply
    cfg = one_route("openai", "openai", upstream.url, headers={"X-Backend-Secret": "s3cr3t-backend-value"})
    gw = await make_gateway(cfg)
    resp = await gw.post("/v1/chat/completions", json={**CHAT, "stream": stream})
    assert resp.status == 502
    err = (await resp.json())["error"]
    assert err["message"] == f"backend 'up' answered with a redirect ({status}), which the gateway does not follow"
    assert err["type"] == "server_error"
    assert elsewhere.requests == []
    assert len(upstream.requests) == 1


async def test_cookies_a_backend_sets_are_never_replayed(upstream, make_gateway):
    async def reply(request: web.Request, rec: Any) -> web.StreamResponse:
        resp = web.Response(body=raw("chat_response.json"), content_type="application/json")
        resp.set_cookie("session", "client-a-session", path="/")
        return resp

    upstream.reply = reply
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    for _ in range(3):
        assert (await gw.post("/v1/chat/completions", json=CHAT)).status == 200
    assert all("Cookie" not in r.headers for r in upstream.requests)


async def test_backend_error_text_is_scrubbed_and_cut_short(upstream, make_gateway):
    token = "dapi0123456789abcdef0123456789abcdef"
    echoed = (
        f"bad request; your headers were Authorization: Bearer {token}, X-Backend-Secret: s3cr3t-backend-value; "
        "also api_key=sk-live-abcdefghijklmnopqrstuvwxyz and hf_abcdefghijklmnopqrstuvwxyz0123 " + "x" * 2000
    )
    upstream.reply = json_reply({"error": {"message": echoed, "type": "invalid_request_error"}}, status=400)
    cfg = one_route("tgi", "openai", upstream.url, headers={"X-Backend-Secret": "s3cr3t-backend-value"})
    gw = await make_gateway(cfg)
    resp = await gw.post("/generate", json={"inputs": "hi", "parameters": {"max_new_tokens": 4}})
    assert resp.status == 422
    message = (await resp.json())["error"]
    for secret in (token, "s3cr3t-backend-value", "sk-live-abcdefghijklmnopqrstuvwxyz", "hf_abcdefghijklmnop"):
        assert secret not in message
    assert "[REDACTED]" in message
    assert len(message) <= 512
    assert message.startswith("backend 'up' answered 400: bad request; your headers were Authorization: [REDACTED]")


async def test_midstream_error_text_is_scrubbed(upstream, make_gateway):
    from tests.support import sse_reply

    frames = [b'data: {"error": {"message": "engine died; token=abcdef0123456789 leaked"}}\n\n']
    upstream.reply = sse_reply(frames)
    gw = await make_gateway(one_route("tgi", "openai", upstream.url))
    resp = await gw.post("/generate_stream", json={"inputs": "hi"})
    body = await resp.read()
    assert b"abcdef0123456789" not in body
    assert b"token=[REDACTED]" in body


@pytest.mark.parametrize("name", ["..", ".", "a/b", "a%2Fb", "x y", "é"])
async def test_triton_model_names_cannot_walk_the_backends_url(upstream, make_gateway, name):
    upstream.reply = json_reply({"model_name": "m", "model_version": "1", "text_output": "hi"})
    gw = await make_gateway(one_route("openai", "triton", upstream.url))
    resp = await gw.post("/v1/completions", json={"model": name, "prompt": "hi", "max_tokens": 4})
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["param"] == "model" and "not a valid Triton model name" in err["message"]
    assert upstream.requests == []
    ok = await gw.post("/v1/completions", json={"model": "llama-3.1_8b", "prompt": "hi", "max_tokens": 4})
    assert ok.status == 200
    assert upstream.last.path == "/v2/models/llama-3.1_8b/generate"


@pytest.mark.parametrize("name", ["..", ".", "a.b", "x y", "a%2F"])
async def test_databricks_endpoint_names_are_names(upstream, make_gateway, name):
    upstream.reply = raw_reply(raw("chat_response.json"))
    cfg = one_route("openai", "databricks", upstream.url)
    cfg["routes"][0]["models"] = [name, "good-endpoint_1"]
    gw = await make_gateway(cfg)
    resp = await gw.post("/v1/chat/completions", json={**CHAT, "model": name})
    assert resp.status == 400
    assert "not a valid serving endpoint name" in (await resp.json())["error"]["message"]
    assert upstream.requests == []
    assert (await gw.post("/v1/chat/completions", json={**CHAT, "model": "good-endpoint_1"})).status == 200
    assert upstream.last.path == "/serving-endpoints/good-endpoint_1/invocations"


def test_a_databricks_route_must_say_which_endpoints_clients_may_call():
    cfg = one_route("openai", "databricks", "https://workspace.example")
    with pytest.raises(ConfigError) as e:
        parse_config(cfg)
    assert e.value.lines == [
        "routes.0.models: backend 'up' (databricks) has no `model:`, so clients would pick any endpoint its "
        "credentials reach; list the models this route may call, or set the backend's model"
    ]
    parse_config({**cfg, "routes": [{**cfg["routes"][0], "models": ["chat-endpoint"]}]})
    cfg["backends"]["up"]["model"] = "chat-endpoint"
    parse_config(cfg)
