"""Bad client input of every kind: a clear OpenAI error with the right status, never a 500, never
a request to the backend, and the gateway keeps serving afterwards."""

from typing import Any

import pytest

from tests.conftest import one_route
from tests.fixtures.openai.wire import raw
from tests.support import raw_reply

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def gw(upstream, make_gateway) -> Any:
    upstream.reply = raw_reply(raw("chat_response.json"))
    cfg = one_route("openai", "openai", upstream.url)
    cfg["limits"] = {"max_body_bytes": 2048}
    cfg["routes"][0]["models"] = ["a"]
    return await make_gateway(cfg)


CHAT_CASES: list[tuple[str, bytes | dict[str, Any], int, str | None]] = [
    ("invalid json", b'{"model": "a", "messages": [', 400, None),
    ("empty body", b"", 400, None),
    ("whitespace body", b"  \n", 400, None),
    ("array body", b"[1, 2]", 400, None),
    ("string body", b'"hello"', 400, None),
    ("null body", b"null", 400, None),
    ("not utf-8", b'{"model": "\xff\xfe"}', 400, None),
    ("max_tokens as string", {"model": "a", "messages": MSGS, "max_tokens": "5"}, 400, "max_tokens"),
    ("max_tokens float", {"model": "a", "messages": MSGS, "max_tokens": 5.5}, 400, "max_tokens"),
    ("n as bool", {"model": "a", "messages": MSGS, "n": True}, 400, "n"),
    ("stream as string", {"model": "a", "messages": MSGS, "stream": "yes"}, 400, "stream"),
    ("temperature 3", {"model": "a", "messages": MSGS, "temperature": 3}, 400, "temperature"),
    ("temperature negative", {"model": "a", "messages": MSGS, "temperature": -0.1}, 400, "temperature"),
    ("top_p 2", {"model": "a", "messages": MSGS, "top_p": 2}, 400, "top_p"),
    ("n 0", {"model": "a", "messages": MSGS, "n": 0}, 400, "n"),
    ("max_tokens 0", {"model": "a", "messages": MSGS, "max_tokens": 0}, 400, "max_tokens"),
    ("presence_penalty 3", {"model": "a", "messages": MSGS, "presence_penalty": 3}, 400, "presence_penalty"),
    (
        "top_logprobs 21",
        {"model": "a", "messages": MSGS, "logprobs": True, "top_logprobs": 21},
        400,
        "top_logprobs",
    ),
    ("top_logprobs without logprobs", {"model": "a", "messages": MSGS, "top_logprobs": 2}, 400, None),
    ("five stop strings", {"model": "a", "messages": MSGS, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ("logit_bias out of range", {"model": "a", "messages": MSGS, "logit_bias": {"5": 101}}, 400, "logit_bias"),
    ("no messages", {"model": "a"}, 400, "messages"),
    ("empty messages", {"model": "a", "messages": []}, 400, "messages"),
    ("messages not a list", {"model": "a", "messages": "hi"}, 400, "messages"),
    ("message not an object", {"model": "a", "messages": ["hi"]}, 400, "messages.0"),
    ("user without content", {"model": "a", "messages": [{"role": "user"}]}, 400, "messages.0"),
    ("unknown role", {"model": "a", "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0.role"),
    (
        "text part without text",
        {"model": "a", "messages": [{"role": "user", "content": [{"type": "text"}]}]},
        400,
        None,
    ),
    ("no model", {"messages": MSGS}, 400, "model"),
    ("empty model", {"model": "", "messages": MSGS}, 400, "model"),
    ("model not a string", {"model": 5, "messages": MSGS}, 400, "model"),
    (
        "stream_options without stream",
        {"model": "a", "messages": MSGS, "stream_options": {"include_usage": True}},
        400,
        None,
    ),
    ("tool_choice without tools", {"model": "a", "messages": MSGS, "tool_choice": "required"}, 400, None),
    ("bad tool", {"model": "a", "messages": MSGS, "tools": [{"type": "function"}]}, 400, "tools.0.function"),
    ("bad response_format", {"model": "a", "messages": MSGS, "response_format": {"type": "yaml"}}, 400, None),
    ("unknown model", {"model": "b", "messages": MSGS}, 404, "model"),
]


@pytest.mark.parametrize(("body", "status", "param"), [c[1:] for c in CHAT_CASES], ids=[c[0] for c in CHAT_CASES])
async def test_bad_chat_requests(gw, upstream, body, status, param):
    kw: dict[str, Any] = {"json": body} if isinstance(body, dict) else {"data": body}
    resp = await gw.post("/v1/chat/completions", **kw)
    assert resp.status == status
    assert resp.headers["Content-Type"].startswith("application/json")
    err = (await resp.json())["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error"
    assert err["message"]
    if param is not None:
        assert err["param"] == param
    if status == 404:
        assert err["code"] == "model_not_found"
    assert upstream.requests == []
    # Still serving.
    ok = await gw.post("/v1/chat/completions", json={"model": "a", "messages": MSGS})
    assert ok.status == 200


OTHER_CASES: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("completion no prompt", "/v1/completions", {"model": "a"}, "prompt"),
    ("completion empty prompt list", "/v1/completions", {"model": "a", "prompt": []}, "prompt"),
    ("completion negative token", "/v1/completions", {"model": "a", "prompt": [1, -2]}, "prompt"),
    ("completion logprobs -1", "/v1/completions", {"model": "a", "prompt": "p", "logprobs": -1}, "logprobs"),
    ("completion best_of 0", "/v1/completions", {"model": "a", "prompt": "p", "best_of": 0}, "best_of"),
    ("embedding no input", "/v1/embeddings", {"model": "a"}, "input"),
    ("embedding empty list", "/v1/embeddings", {"model": "a", "input": []}, "input"),
    ("embedding bad format", "/v1/embeddings", {"model": "a", "input": "x", "encoding_format": "hex"}, None),
    ("embedding dimensions 0", "/v1/embeddings", {"model": "a", "input": "x", "dimensions": 0}, "dimensions"),
    ("embedding input number", "/v1/embeddings", {"model": "a", "input": 5}, "input"),
]


@pytest.mark.parametrize(("path", "body", "param"), [c[1:] for c in OTHER_CASES], ids=[c[0] for c in OTHER_CASES])
async def test_bad_completion_and_embedding_requests(gw, upstream, path, body, param):
    resp = await gw.post(path, json=body)
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] == param
    assert upstream.requests == []


async def test_oversized_body_is_413(gw, upstream):
    big = {"model": "a", "messages": [{"role": "user", "content": "x" * 4096}]}
    resp = await gw.post("/v1/chat/completions", json=big)
    assert resp.status == 413
    err = (await resp.json())["error"]
    assert err["type"] == "invalid_request_error"
    assert "2048" in err["message"]

    # Chunked upload without a Content-Length: caught while reading.
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(10):
            yield b"x" * 1024

    resp = await gw.post("/v1/chat/completions", data=chunks())
    assert resp.status == 413
    assert (await resp.json())["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []
    assert (await gw.post("/v1/chat/completions", json={"model": "a", "messages": MSGS})).status == 200


async def test_unknown_paths_and_methods_answer_in_the_mounted_dialects_shape(gw):
    # Only OpenAI is mounted here, so every path the router cannot match is OpenAI's to answer.
    resp = await gw.get("/v2/nothing/here")
    assert resp.status == 404
    assert resp.headers["Content-Type"].startswith("application/json")
    err = (await resp.json())["error"]
    assert err["type"] == "invalid_request_error"
    assert err["message"] == "GET /v2/nothing/here: not served here"
    resp = await gw.get("/v1/chat/completions")
    assert resp.status == 405
    assert (await resp.json())["error"]["type"] == "invalid_request_error"
    resp = await gw.post("/v1/models", json={})
    assert resp.status == 405
    resp = await gw.get("/%2e%2e/%00%ff/\u202e")
    assert resp.status == 404
    assert "message" in (await resp.json())["error"]


async def test_never_a_500_for_odd_but_valid_json(gw, upstream):
    odd = [
        {"model": "a", "messages": MSGS, "unknown": {"deep": [None, 1e308, "\u0000"]}},
        {
            "model": "a",
            "messages": [
                {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]}
            ],
        },
        {"model": "a", "messages": MSGS, "stop": []},
        {"model": "a", "messages": MSGS, "logit_bias": {}},
        {"model": "a", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
    ]
    for body in odd:
        resp = await gw.post("/v1/chat/completions", json=body)
        assert resp.status == 200, body
    assert len(upstream.requests) == len(odd)


async def test_unmatched_paths_answer_in_the_shape_of_the_dialect_mounted_there(upstream, make_gateway):
    backends = {"up": {"dialect": "openai", "url": upstream.url}}
    routes = [
        {"name": d, "dialect": d, "backend": "up", **({"prefix": "/mindie"} if d == "mindie" else {})}
        for d in ("openai", "mindie", "tgi", "triton", "databricks")
    ]
    gw = await make_gateway({"backends": backends, "routes": routes})

    async def answer(method: str, path: str) -> tuple[int, Any]:
        resp = await gw.request(method, path)
        return resp.status, await resp.json()

    status, body = await answer("GET", "/v1/nope")
    assert status == 404 and body["error"]["type"] == "invalid_request_error"
    status, body = await answer("POST", "/v2/models/m/infer")
    assert status == 404 and body == {"error": "POST /v2/models/m/infer: not served here"}
    status, body = await answer("GET", "/mindie/nope")
    assert status == 404 and body["error_type"] == "NotFoundError"
    status, body = await answer("POST", "/serving-endpoints/x/nope")
    assert status == 404 and body["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    status, body = await answer("GET", "/generate")
    assert status == 404 and body["error_type"] == "not_found"  # TGI's path, wrong method: TGI's shape
    # A path no dialect claims under a prefix several share: plain JSON, still no traceback.
    status, body = await answer("GET", "/%00odd/\u202e")
    assert status == 404 and set(body) == {"error"}
    assert upstream.requests == []
