"""Databricks through a running gateway: both directions, streams, batches, errors, the OpenAI SDK."""

from pathlib import Path
from typing import Any

import pytest

from gateway import jsonutil
from tests.conftest import one_route
from tests.support import json_reply, raw_reply, sse_json, sse_reply

FIX = Path(__file__).parent / "fixtures" / "databricks"
INV = "/serving-endpoints/my-ep/invocations"


def fixture(name: str) -> Any:
    return jsonutil.loads((FIX / name).read_bytes())


def stream_frames(name: str) -> list[bytes]:
    return [f + b"\n\n" for f in (FIX / name).read_bytes().split(b"\n\n") if f]


OPENAI_CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-x",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hallo"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


# ---- databricks inbound -> openai backend ------------------------------------------------


async def test_chat_to_openai_exact_request_and_response(upstream, make_gateway):
    upstream.reply = json_reply(OPENAI_CHAT)
    gw = await make_gateway(one_route("databricks", "openai", upstream.url, model="gpt-x"))
    body = fixture("chat_request.json")
    resp = await gw.post(INV, json=body)
    assert resp.status == 200, await resp.text()
    assert upstream.last.path == "/v1/chat/completions"
    assert upstream.last.json == {
        "model": "gpt-x",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the weather in Berlin?"},
            {"role": "assistant", "content": None, "tool_calls": body["messages"][2]["tool_calls"]},
            {"role": "tool", "content": '{"temp_c": 21}', "tool_call_id": "call_1"},
        ],
        "stop": ["\n\n"],
        "n": 2,
        "tools": body["tools"],
        "tool_choice": "auto",
        "response_format": body["response_format"],
        "max_completion_tokens": 128,
        "temperature": 0.7,
        "top_p": 0.9,
        "logprobs": True,
        "top_logprobs": 2,
    }
    # top_k has no public OpenAI equivalent: dropped and named.
    assert resp.headers["X-Gateway-Dropped-Params"] == "top_k"
    out = await resp.json()
    rid = resp.headers["X-Request-Id"]
    assert out == {
        "id": "chatcmpl_" + rid,
        "object": "chat.completion",
        "created": out["created"],
        "model": "my-ep",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hallo"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


async def test_chat_stream_to_openai_exact_frames(upstream, make_gateway):
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x"}
    frames = [
        b"data: " + jsonutil.dumps({**chunk, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}) + b"\n\n",
        b"data: " + jsonutil.dumps({**chunk, "choices": [{"index": 0, "delta": {"content": "Ja"}}]}) + b"\n\n",
        b"data: "
        + jsonutil.dumps({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        + b"\n\n",
        b"data: "
        + jsonutil.dumps({**chunk, "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1}})
        + b"\n\n",
        b"data: [DONE]\n\n",
    ]
    upstream.reply = sse_reply(frames)
    gw = await make_gateway(one_route("databricks", "openai", upstream.url))
    resp = await gw.post(INV, json={"messages": [{"role": "user", "content": "x"}], "stream": True, "max_tokens": 1})
    assert resp.status == 200
    assert upstream.last.json == {
        "model": "my-ep",
        "messages": [{"role": "user", "content": "x"}],
        "max_completion_tokens": 1,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    rid = resp.headers["X-Request-Id"]
    head = b'data: {"id":"chatcmpl_%b","object":"chat.completion.chunk","created":%d,"model":"my-ep","choices":['
    text = await resp.read()
    created = sse_json(text)[0]["created"]
    h = head % (rid.encode(), created)
    assert text == (
        h
        + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
        + h
        + b'{"index":0,"delta":{"content":"Ja"},"logprobs":null,"finish_reason":null}]}\n\n'
        + h
        + b'{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}\n\n'
        + b"data: [DONE]\n\n"
    )


async def test_batch_completion_to_openai_is_one_request(upstream, make_gateway):
    upstream.reply = json_reply(
        {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [
                {"index": 0, "text": " Paris", "logprobs": None, "finish_reason": "stop"},
                {"index": 1, "text": " Rom", "logprobs": None, "finish_reason": "stop"},
            ],
            "usage": {"prompt_tokens": 14, "completion_tokens": 4, "total_tokens": 18},
        }
    )
    gw = await make_gateway(one_route("databricks", "openai", upstream.url, model="m"))
    resp = await gw.post(INV, json=fixture("completion_request.json"))
    assert resp.status == 200, await resp.text()
    assert len(upstream.requests) == 1
    assert upstream.last.json == {
        "model": "m",
        "prompt": ["Die Hauptstadt von Frankreich ist", "Die Hauptstadt von Italien ist"],
        "stop": ["."],
        "max_tokens": 16,
        "temperature": 0.5,
        "top_p": 1.0,
    }
    out = await resp.json()
    assert out["object"] == "text_completion" and "model" not in out
    assert out["choices"] == [
        {"index": 0, "text": " Paris", "finish_reason": "stop"},
        {"index": 1, "text": " Rom", "finish_reason": "stop"},
    ]


async def test_embeddings_to_openai_refuse_instruction_and_map_input(upstream, make_gateway):
    upstream.reply = json_reply(
        {
            "object": "list",
            "model": "e",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.25, 0.5]}],
            "usage": {"prompt_tokens": 2, "total_tokens": 2},
        }
    )
    gw = await make_gateway(one_route("databricks", "openai", upstream.url, model="e"))
    resp = await gw.post(INV, json=fixture("embedding_request.json"))
    assert resp.status == 400
    err = await resp.json()
    assert err["error_code"] == "INVALID_PARAMETER_VALUE" and "instruction" in err["message"]
    assert not upstream.requests
    resp = await gw.post(INV, json={"input": "Es regnet."})
    assert resp.status == 200
    assert upstream.last.json == {"model": "e", "input": ["Es regnet."]}
    out = await resp.json()
    assert out == {
        "id": "emb_" + resp.headers["X-Request-Id"],
        "object": "list",
        "model": "my-ep",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.25, 0.5]}],
        "usage": {"prompt_tokens": 2, "total_tokens": 2},
    }


# ---- openai inbound -> databricks backend ------------------------------------------------


async def test_openai_chat_to_databricks_exact_request_with_bearer(upstream, make_gateway, monkeypatch):
    monkeypatch.setenv("DATABRICKS_TOKEN", "dapi-secret")
    upstream.reply = json_reply(fixture("chat_response.json"))
    conf = one_route(
        "openai",
        "databricks",
        upstream.url,
        model="databricks-llama",
        headers={"Authorization": "Bearer ${DATABRICKS_TOKEN}"},
    )
    gw = await make_gateway(conf)
    resp = await gw.post(
        "/v1/chat/completions",
        headers={"Authorization": "Bearer client-key"},
        json={
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": "Hi"}],
            "max_completion_tokens": 20,
            "temperature": 0.1,
            "seed": 7,
            "n": 2,
        },
    )
    assert resp.status == 200, await resp.text()
    assert upstream.last.path == "/serving-endpoints/databricks-llama/invocations"
    assert upstream.last.headers["Authorization"] == "Bearer dapi-secret"
    assert upstream.last.json == {
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 20,
        "temperature": 0.1,
        "n": 2,
        "stream": False,
    }
    assert resp.headers["X-Gateway-Dropped-Params"] == "seed"
    out = await resp.json()
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["content"] == "It is 21 degrees in Berlin."
    assert out["usage"] == {"prompt_tokens": 57, "completion_tokens": 9, "total_tokens": 66}


async def test_openai_stream_to_databricks_stream_without_done(upstream, make_gateway):
    upstream.reply = sse_reply(stream_frames("chat_stream.txt"))
    gw = await make_gateway(one_route("openai", "databricks", upstream.url, model="ep"))
    resp = await gw.post(
        "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True},
    )
    assert resp.status == 200
    assert upstream.last.json == {"messages": [{"role": "user", "content": "Hi"}], "stream": True}
    events = sse_json(await resp.read())
    assert [e["choices"][0]["delta"] for e in events[:-1]] == [
        {"role": "assistant", "content": ""},
        {"content": "Hallo"},
        {"content": " Welt"},
        {"content": "!"},
        {},
    ]
    assert events[-2]["choices"][0]["finish_reason"] == "stop" and events[-1] == "[DONE]"


async def test_openai_completions_and_embeddings_to_databricks(upstream, make_gateway):
    upstream.reply = json_reply(fixture("completion_response.json"))
    gw = await make_gateway(one_route("openai", "databricks", upstream.url, model="ep"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": ["a", "b"], "echo": True, "suffix": "."})
    assert resp.status == 200
    assert len(upstream.requests) == 1
    assert upstream.last.json == {"prompt": ["a", "b"], "max_tokens": 16, "suffix": ".", "echo": True, "stream": False}
    out = await resp.json()
    assert [(c["index"], c["text"]) for c in out["choices"]] == [(0, " Paris"), (1, " Rom")]
    upstream.reply = json_reply(fixture("embedding_response.json"))
    resp = await gw.post("/v1/embeddings", json={"model": "m", "input": ["x", "y"], "encoding_format": "base64"})
    assert resp.status == 200
    assert upstream.last.json == {"input": ["x", "y"]}
    assert isinstance((await resp.json())["data"][0]["embedding"], str)
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": [1, 2, 3]})
    assert resp.status == 400 and "token ids" in (await resp.json())["error"]["message"]


async def test_databricks_upstream_errors_map_to_openai(upstream, make_gateway):
    upstream.reply = json_reply(fixture("error_rate_limit.json"), status=429)
    gw = await make_gateway(one_route("openai", "databricks", upstream.url, model="ep"))
    resp = await gw.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "a"}]})
    assert resp.status == 429
    assert "REQUEST_LIMIT_EXCEEDED: Exceeded workspace rate limit" in (await resp.json())["error"]["message"]


# ---- databricks -> databricks -------------------------------------------------------------


async def test_databricks_to_databricks_passthrough(upstream, make_gateway):
    upstream.reply = json_reply(fixture("chat_tool_response.json"))
    gw = await make_gateway(one_route("databricks", "databricks", upstream.url, model="backend-ep"))
    body = {"messages": [{"role": "user", "content": "a"}], "extra_params": {"k": "v"}, "model": "ignored"}
    resp = await gw.post(INV, json=body)
    assert resp.status == 200
    assert upstream.last.path == "/serving-endpoints/backend-ep/invocations"
    assert upstream.last.json == {
        "messages": [{"role": "user", "content": "a"}],
        "extra_params": {"k": "v"},
        "stream": False,
    }
    assert await resp.json() == fixture("chat_tool_response.json")
    upstream.reply = json_reply(fixture("embedding_response.json"))
    resp = await gw.post(INV, json=fixture("embedding_request.json"))
    assert upstream.last.json == fixture("embedding_request.json")
    assert await resp.json() == fixture("embedding_response.json")


async def test_databricks_to_databricks_stream(upstream, make_gateway):
    upstream.reply = sse_reply(stream_frames("chat_stream.txt"))
    gw = await make_gateway(one_route("databricks", "databricks", upstream.url, model="backend-ep"))
    resp = await gw.post(INV, json={"messages": [{"role": "user", "content": "a"}], "stream": True})
    assert resp.status == 200
    assert await resp.read() == (FIX / "chat_stream.txt").read_bytes() + b"data: [DONE]\n\n"


async def test_databricks_batch_completion_stream_to_databricks(upstream, make_gateway):
    upstream.reply = sse_reply(stream_frames("completion_stream.txt"))
    gw = await make_gateway(one_route("databricks", "databricks", upstream.url, model="b"))
    resp = await gw.post(INV, json={"prompt": ["a", "b"], "stream": True})
    assert resp.status == 200
    assert upstream.last.json == {"prompt": ["a", "b"], "stream": True}
    assert sse_json(await resp.read())[-1] == "[DONE]"


# ---- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "want_status", "want_code"),
    [
        (429, fixture("error_rate_limit.json"), 429, "REQUEST_LIMIT_EXCEEDED"),
        (400, fixture("error_bad_param.json"), 400, "INVALID_PARAMETER_VALUE"),
        # The endpoint the gateway's config names is missing: the operator's fault, not the client's.
        (404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no ep"}, 500, "INTERNAL_ERROR"),
        (503, {"error_code": "TEMPORARILY_UNAVAILABLE", "message": "scaled to zero"}, 503, "TEMPORARILY_UNAVAILABLE"),
        (504, {"error_code": "DEADLINE_EXCEEDED", "message": "slow"}, 504, "DEADLINE_EXCEEDED"),
        (500, {"error_code": "INTERNAL_ERROR", "message": "oops"}, 500, "INTERNAL_ERROR"),
        (401, {"error_code": "UNAUTHENTICATED", "message": "bad token"}, 500, "INTERNAL_ERROR"),
    ],
)
async def test_upstream_errors_map_to_databricks_codes(upstream, make_gateway, status, body, want_status, want_code):
    upstream.reply = json_reply(body, status=status)
    gw = await make_gateway(one_route("databricks", "databricks", upstream.url, model="b"))
    resp = await gw.post(INV, json={"messages": [{"role": "user", "content": "a"}]})
    assert resp.status == want_status
    err = await resp.json()
    assert err["error_code"] == want_code and body["message"] in err["message"]


async def test_html_upstream_error_and_bad_json_body(upstream, make_gateway):
    upstream.reply = raw_reply(b"<html>Bad Gateway</html>", status=502, content_type="text/html")
    gw = await make_gateway(one_route("databricks", "openai", upstream.url))
    resp = await gw.post(INV, json={"prompt": "a"})
    assert resp.status == 500 and (await resp.json())["error_code"] == "INTERNAL_ERROR"
    resp = await gw.post(INV, data=b"{not json")
    assert resp.status == 400 and (await resp.json())["error_code"] == "INVALID_PARAMETER_VALUE"
    resp = await gw.post(INV, data=b"[1]")
    assert resp.status == 400 and (await resp.json())["error_code"] == "INVALID_PARAMETER_VALUE"


async def test_unknown_endpoint_is_resource_does_not_exist(upstream, make_gateway):
    conf = one_route("databricks", "openai", upstream.url)
    conf["routes"][0]["models"] = ["my-ep"]
    gw = await make_gateway(conf)
    resp = await gw.post("/serving-endpoints/other/invocations", json={"prompt": "a"})
    assert resp.status == 404
    assert (await resp.json())["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    resp = await gw.get("/api/2.0/serving-endpoints/other")
    assert resp.status == 404
    resp = await gw.get("/api/2.0/serving-endpoints/my-ep")
    assert (await resp.json())["state"]["ready"] == "READY"


async def test_midstream_failure_is_inband_error_then_done(upstream, make_gateway):
    upstream.reply = sse_reply(stream_frames("chat_stream.txt")[:1])  # cut off before any finish_reason
    gw = await make_gateway(one_route("databricks", "databricks", upstream.url, model="b"))
    resp = await gw.post(INV, json={"messages": [{"role": "user", "content": "a"}], "stream": True})
    assert resp.status == 200
    events = sse_json(await resp.read())
    assert events[-1] == "[DONE]"
    assert events[-2]["error_code"] == "INTERNAL_ERROR"
    assert events[-2]["error"]["message"] == events[-2]["message"]


async def test_readyz_reads_endpoint_state(upstream, make_gateway):
    upstream.reply = json_reply(fixture("endpoint_not_ready.json"))
    gw = await make_gateway(one_route("databricks", "databricks", upstream.url, model="my-provisioned-llm"))
    resp = await gw.get("/readyz")
    assert resp.status == 503
    assert upstream.last.method == "GET" and upstream.last.path == "/api/2.0/serving-endpoints/my-provisioned-llm"
