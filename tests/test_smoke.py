"""The embedded default serves at once, and a translated exchange reaches a fake upstream."""

from gateway.app import create_app
from gateway.configfile import embedded_default
from tests.conftest import one_route
from tests.support import json_reply


async def test_embedded_default_answers_openai_chat(aiohttp_client):
    client = await aiohttp_client(create_app(embedded_default()))
    resp = await client.post(
        "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert resp.status == 200
    body = await resp.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"].startswith("Simulated answer 0: you said hi.")


async def test_openai_route_forwards_unknown_fields(upstream, make_gateway):
    upstream.reply = json_reply(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 1,
            "model": "b",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        }
    )
    gw = await make_gateway(one_route("openai", "openai", upstream.url, model="backend-model"))
    resp = await gw.post(
        "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "vendor_knob": {"a": 1}},
    )
    assert resp.status == 200
    assert upstream.last.path == "/v1/chat/completions"
    assert upstream.last.json == {
        "model": "backend-model",
        "messages": [{"role": "user", "content": "hi"}],
        "vendor_knob": {"a": 1},
    }
