"""OpenAI client -> gateway -> OpenAI-style backend (FakeUpstream): the exact upstream request and
the exact answer, whole and streamed."""

from typing import Any

from gateway import jsonutil
from tests.conftest import one_route
from tests.fixtures.openai.wire import load, raw
from tests.support import json_reply, raw_reply, sse_json, sse_reply

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def frames(name: str) -> list[bytes]:
    return [f + b"\n\n" for f in raw(name).split(b"\n\n") if f]


async def test_exact_upstream_request_and_headers(upstream, make_gateway):
    upstream.reply = raw_reply(raw("chat_response.json"))
    gw = await make_gateway(
        one_route(
            "openai", "openai", upstream.url + "/prefix", model="up-model", headers={"Authorization": "Bearer up"}
        )
    )
    resp = await gw.post(
        "/v1/chat/completions",
        json={**CHAT, "unknown_field": [1, {"x": None}]},
        headers={
            "Authorization": "Bearer client-secret",
            "req-id": "7",
            "req-type": "prefill",
            "d-target": "10.0.0.1",
            "is-recompute": "true",
            "X-Request-Id": "rid-123",
            "OpenAI-Organization": "org-1",
        },
    )
    assert resp.status == 200
    assert resp.headers["X-Request-Id"] == "rid-123"
    assert "X-Gateway-Dropped-Params" not in resp.headers
    # Same dialect: the upstream body comes back byte for byte, but for the model: the route
    # gives the backend another name than the client's, and the client reads its own.
    renamed = raw("chat_response.json").replace(b'"model": "gpt-4o-mini-2024-07-18"', b'"model": "gpt-4o-mini"')
    assert await resp.read() == renamed
    assert len(upstream.requests) == 1
    up = upstream.last
    assert up.method == "POST"
    assert up.path == "/prefix/v1/chat/completions"
    assert up.json == {**CHAT, "model": "up-model", "unknown_field": [1, {"x": None}]}
    lower = {k.lower(): v for k, v in up.headers.items()}
    assert lower["authorization"] == "Bearer up"
    assert lower["x-request-id"] == "rid-123"
    assert lower["content-type"] == "application/json"
    for steering in ("req-id", "req-type", "d-target", "is-recompute", "openai-organization"):
        assert steering not in lower


async def test_request_id_generated_when_absent(upstream, make_gateway):
    upstream.reply = json_reply(load("chat_response.json"))
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    rid = resp.headers["X-Request-Id"]
    assert len(rid) == 32
    assert {k.lower(): v for k, v in upstream.last.headers.items()}["x-request-id"] == rid
    # No backend model configured: the client's model name goes through.
    assert upstream.last.json["model"] == "gpt-4o-mini"
    assert "authorization" not in {k.lower() for k in upstream.last.headers}


async def test_completions_and_embeddings_passthrough(upstream, make_gateway):
    gw = await make_gateway(one_route("openai", "openai", upstream.url, model="up"))
    upstream.reply = json_reply(load("completion_response.json"))
    resp = await gw.post("/v1/completions", data=raw("completion_request.json"))
    assert resp.status == 200
    assert await resp.json() == load("completion_response.json")
    assert upstream.last.path == "/v1/completions"
    assert upstream.last.json == {**load("completion_request.json"), "model": "up"}

    for name in ("embedding_response.json", "embedding_response_base64.json"):
        upstream.reply = json_reply(load(name))
        resp = await gw.post("/v1/embeddings", data=raw("embedding_request.json"))
        assert resp.status == 200
        assert await resp.json() == load(name)
        assert upstream.last.path == "/v1/embeddings"
        assert upstream.last.json == {**load("embedding_request.json"), "model": "up"}


async def stream_chat(gw: Any, body: dict[str, Any]) -> tuple[Any, bytes]:
    resp = await gw.post("/v1/chat/completions", json=body)
    return resp, await resp.read()


async def test_stream_usage_withheld_unless_asked(upstream, make_gateway):
    upstream.reply = sse_reply(frames("chat_stream.sse"))
    gw = await make_gateway(one_route("openai", "openai", upstream.url, model="up"))
    resp, body = await stream_chat(gw, {**CHAT, "stream": True})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/event-stream"
    # The gateway asked the upstream for usage on its own behalf...
    assert upstream.last.json == {**CHAT, "model": "up", "stream": True, "stream_options": {"include_usage": True}}
    # ...and the client, who did not, gets every frame but the usage-only one, then [DONE], each
    # without the null usage field that asking adds to it (as the server writes them unasked).
    unasked = b"".join(frames("chat_stream.sse")[:5]).replace(b',"usage":null', b"")
    assert body == unasked + b"data: [DONE]\n\n"

    resp, body = await stream_chat(gw, {**CHAT, "stream": True, "stream_options": {"include_usage": True}})
    assert resp.status == 200
    assert body == raw("chat_stream.sse")
    assert upstream.last.json["stream_options"] == {"include_usage": True}


async def test_tool_call_and_completion_streams_pass_through(upstream, make_gateway):
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    upstream.reply = sse_reply(frames("chat_stream_tool_calls.sse"))
    resp, body = await stream_chat(gw, {**CHAT, "stream": True})
    assert body == raw("chat_stream_tool_calls.sse")
    upstream.reply = sse_reply(frames("completion_stream.sse"))
    resp = await gw.post("/v1/completions", json={"model": "x", "prompt": "p", "stream": True})
    body = await resp.read()
    assert body == b"".join(frames("completion_stream.sse")[:3]) + b"data: [DONE]\n\n"


async def test_upstream_stream_in_one_write_and_crlf(upstream, make_gateway):
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    upstream.reply = raw_reply(raw("chat_stream.sse").replace(b"\n", b"\r\n"), content_type="text/event-stream")
    resp, body = await stream_chat(gw, {**CHAT, "stream": True, "stream_options": {"include_usage": True}})
    assert resp.status == 200
    assert body == raw("chat_stream.sse")


async def test_models_list_and_get(upstream, make_gateway):
    cfg = {
        "backends": {"up": {"dialect": "openai", "url": upstream.url, "model": "bm"}},
        "routes": [
            {"name": "a", "dialect": "openai", "backend": "up", "models": ["m2", "m1"]},
            {"name": "b", "dialect": "openai", "backend": "up"},
        ],
    }
    gw = await make_gateway(cfg)
    resp = await gw.get("/v1/models")
    body = await resp.json()
    assert [m["id"] for m in body["data"]] == ["m1", "m2", "bm"]
    assert body["object"] == "list"
    assert {m["object"] for m in body["data"]} == {"model"}
    resp = await gw.get("/v1/models/m2")
    assert resp.status == 200
    assert (await resp.json())["id"] == "m2"
    resp = await gw.get("/v1/models/nope")
    assert resp.status == 404
    assert (await resp.json())["error"]["code"] == "model_not_found"


async def test_route_selection_by_model(upstream, make_gateway, aiohttp_server):
    from tests.support import FakeUpstream

    other = FakeUpstream()
    server = await aiohttp_server(other.app())
    other.reply = json_reply(load("chat_response.json"))
    upstream.reply = json_reply(load("chat_response.json"))
    cfg = {
        "backends": {
            "one": {"dialect": "openai", "url": upstream.url},
            "two": {"dialect": "openai", "url": str(server.make_url("")).rstrip("/")},
        },
        "routes": [
            {"name": "a", "dialect": "openai", "backend": "one", "models": ["alpha"]},
            {"name": "b", "dialect": "openai", "backend": "two", "models": ["beta"]},
        ],
    }
    gw = await make_gateway(cfg)
    assert (await gw.post("/v1/chat/completions", json={**CHAT, "model": "beta"})).status == 200
    assert (await gw.post("/v1/chat/completions", json={**CHAT, "model": "alpha"})).status == 200
    assert [r.json["model"] for r in upstream.requests] == ["alpha"]
    assert [r.json["model"] for r in other.requests] == ["beta"]
    resp = await gw.post("/v1/chat/completions", json={**CHAT, "model": "gamma"})
    assert resp.status == 404
    assert await resp.json() == {
        "error": {
            "message": "The model 'gamma' does not exist or is not served here",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
    assert len(upstream.requests) + len(other.requests) == 2


async def test_sse_json_helper_roundtrip():
    assert sse_json(raw("chat_stream.sse"))[-1] == "[DONE]"
    assert jsonutil.loads(jsonutil.dumps({"a": 1})) == {"a": 1}


async def test_model_ids_with_slashes(upstream, make_gateway):
    cfg = one_route("openai", "openai", upstream.url)
    cfg["routes"][0]["models"] = ["meta-llama/Llama-3.1-8B-Instruct"]
    gw = await make_gateway(cfg)
    resp = await gw.get("/v1/models/meta-llama/Llama-3.1-8B-Instruct")
    assert resp.status == 200
    assert (await resp.json())["id"] == "meta-llama/Llama-3.1-8B-Instruct"
    resp = await gw.get("/v1/models/meta-llama/other")
    assert resp.status == 404
    assert (await resp.json())["error"]["code"] == "model_not_found"
