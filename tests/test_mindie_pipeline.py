"""MindIE through a running gateway: exact upstream requests and exact client answers."""

from pathlib import Path
from typing import Any

import openai

from gateway import jsonutil
from tests.conftest import one_route
from tests.support import FakeUpstream, json_reply, sse_json, sse_reply

FIX = Path(__file__).parent / "fixtures" / "mindie"

OPENAI_COMPLETION = {
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "text": "am a french", "finish_reason": "length", "logprobs": None}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
}


async def test_infer_token_to_openai_backend(make_gateway: Any, upstream: FakeUpstream) -> None:
    upstream.reply = json_reply(OPENAI_COMPLETION)
    gw = await make_gateway(one_route("mindie", "openai", upstream.url, model="m"))
    resp = await gw.post("/infer_token", data=(FIX / "infer_token_request.json").read_bytes())
    assert resp.status == 200
    assert await resp.json() == {
        "generated_text": "am a french",
        "details": {"finish_reason": "length", "generated_tokens": 3, "seed": None},
    }
    assert upstream.last.path == "/v1/completions"
    assert upstream.last.json == {
        "model": "m",
        "prompt": [5618, 19678, 701, 9072, 13],
        "max_tokens": 20,
        "temperature": 0.5,
        "top_p": 0.95,
    }
    assert resp.headers["X-Gateway-Dropped-Params"] == "priority,repetition_penalty,timeout,top_k,typical_p"


async def test_hints_sent_to_vllm_style_backend(make_gateway: Any, upstream: FakeUpstream) -> None:
    upstream.reply = json_reply(OPENAI_COMPLETION)
    gw = await make_gateway(one_route("mindie", "openai", upstream.url, model="m", options={"extensions": "vllm"}))
    body = {"inputs": "I", "parameters": {"top_k": 10, "repetition_penalty": 1.1, "do_sample": False}}
    resp = await gw.post("/infer", json=body)
    assert resp.status == 200
    assert upstream.last.json == {
        "model": "m",
        "prompt": "I",
        "top_k": 10,
        "repetition_penalty": 1.1,
        "max_tokens": 20,
        "temperature": 0.0,
        # MindIE reports the generated ids: the model's own, not the text tokenised again.
        "return_token_ids": True,
    }
    assert "X-Gateway-Dropped-Params" not in resp.headers


async def test_infer_stream_from_openai_backend(make_gateway: Any, upstream: FakeUpstream) -> None:
    chunks = [
        {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": t, "finish_reason": None}]}
        for t in ("am", " a", " French")
    ]
    chunks.append(
        {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}
    )
    chunks.append({"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})
    frames = [b"data: " + jsonutil.dumps(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]
    upstream.reply = sse_reply(frames)
    gw = await make_gateway(one_route("mindie", "openai", upstream.url, model="m"))
    body = {"input_id": [5618, 19678], "stream": True, "parameters": {"details": True, "seed": 9}}
    resp = await gw.post("/infer_token", json=body)
    events = sse_json(await resp.read())
    assert [e["token"] for e in events] == [
        {"id": None, "text": "am"},
        {"id": None, "text": " a"},
        {"id": None, "text": None},
    ]
    assert events[0]["prefill_time"] is not None and events[0]["decode_time"] is None
    assert events[1]["prefill_time"] is None and events[1]["decode_time"] is not None
    assert events[-1]["generated_text"] == "am a French"
    assert events[-1]["details"] == {"finish_reason": "eos_token", "generated_tokens": 3, "seed": 9}


async def test_openai_sdk_against_mindie_backend(make_gateway: Any, upstream: FakeUpstream) -> None:
    upstream.reply = json_reply(jsonutil.loads((FIX / "chat_response.json").read_bytes()))
    gw = await make_gateway(one_route("openai", "mindie", upstream.url, model="qwen"))
    client = openai.AsyncOpenAI(base_url=str(gw.make_url("/v1")), api_key="x")
    out = await client.chat.completions.create(
        model="qwen", messages=[{"role": "user", "content": "best city?"}], temperature=0, top_p=1.0
    )
    assert out.choices[0].message.content.startswith("The best city in China")
    assert out.choices[0].finish_reason == "stop"
    assert out.usage is not None and out.usage.prompt_tokens == 45
    assert upstream.last.path == "/v1/chat/completions"
    assert upstream.last.json == {
        "model": "qwen",
        "messages": [{"role": "user", "content": "best city?"}],
        "max_tokens": 1024,
        "temperature": 0,
        "top_p": 1.0,
    }


async def test_openai_sdk_stream_from_mindie_backend(make_gateway: Any, upstream: FakeUpstream) -> None:
    frames = [f + b"\n\n" for f in (FIX / "chat_stream_full_text.txt").read_bytes().split(b"\n\n") if f]
    upstream.reply = sse_reply(frames)
    gw = await make_gateway(one_route("openai", "mindie", upstream.url, model="deepseek", options={"full_text": True}))
    client = openai.AsyncOpenAI(base_url=str(gw.make_url("/v1")), api_key="x")
    stream = await client.chat.completions.create(
        model="deepseek", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text, finish = "", None
    async for chunk in stream:
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text == "Hello! How can I assist you today?"
    assert finish == "length"


async def test_openai_completion_to_mindie_native(make_gateway: Any, upstream: FakeUpstream) -> None:
    upstream.reply = json_reply(jsonutil.loads((FIX / "infer_token_response.json").read_bytes()))
    gw = await make_gateway(one_route("openai", "mindie", upstream.url, model="m"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": [5618, 19678], "max_tokens": 20, "top_p": 1})
    assert resp.status == 200
    out = await resp.json()
    assert out["choices"][0]["text"].startswith("am a french native speaker")
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"] == {"prompt_tokens": 2, "completion_tokens": 20, "total_tokens": 22}
    assert upstream.last.path == "/infer_token"
    assert upstream.last.json == {
        "input_id": [5618, 19678],
        "stream": False,
        "parameters": {"max_new_tokens": 20, "details": True},
    }


async def test_stop_moves_completion_to_openai_route(make_gateway: Any, upstream: FakeUpstream) -> None:
    upstream.reply = json_reply(OPENAI_COMPLETION)
    gw = await make_gateway(one_route("openai", "mindie", upstream.url, model="m"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "hi", "stop": ["\n"], "temperature": 0})
    assert resp.status == 200
    assert upstream.last.path == "/v1/completions"
    assert upstream.last.json == {"model": "m", "prompt": "hi", "stop": ["\n"], "max_tokens": 16, "temperature": 0}


async def test_mindie_to_mindie_stream_with_midstream_failure(make_gateway: Any, upstream: FakeUpstream) -> None:
    lines = (FIX / "infer_token_stream.txt").read_bytes().split(b"\n\n")
    upstream.reply = sse_reply([line + b"\n\n" for line in lines[:3]] + [b"Engine callback timeout: client timeout"])
    gw = await make_gateway(one_route("mindie", "mindie", upstream.url))
    resp = await gw.post("/infer_token", json={"input_id": [5618, 19678], "stream": True})
    body = await resp.read()
    assert upstream.last.path == "/infer_token"
    assert upstream.last.json["parameters"] == {"max_new_tokens": 20, "details": True}
    assert b'"text":"am"' in body and b'"text":" a"' in body
    assert body.rstrip().splitlines()[-1].startswith(b"backend broke off the stream: Engine callback timeout")


async def test_bad_inputs_are_mindie_422(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = await make_gateway(one_route("mindie", "openai", upstream.url))
    cases = [
        ("/infer", b"not json"),
        ("/infer", b"[]"),
        ("/infer_token", b'{"input_id": [1, 2]}'),
        ("/infer", b'{"inputs": "x", "parameters": {"top_p": 1.0}}'),
        ("/generate", b'{"foo": 1}'),
        ("/generate_stream", b'{"inputs": ""}'),
        ("/", b'{"inputs": "x", "parameters": {"temperature": -1}}'),
        ("/v1/chat/completions", b'{"model": "m", "messages": []}'),
        ("/v1/completions", b'{"model": "m"}'),
    ]
    for path, body in cases:
        resp = await gw.post(path, data=body)
        assert resp.status == 422, (path, await resp.text())
        err = await resp.json()
        assert err["error_type"] == "Input Validation Error" and err["error"]
    assert upstream.requests == []


async def test_upstream_failure_is_mindie_error(make_gateway: Any, upstream: FakeUpstream) -> None:
    upstream.reply = json_reply({"error": "boom", "error_type": "Incomplete Generation"}, status=500)
    gw = await make_gateway(one_route("mindie", "mindie", upstream.url))
    resp = await gw.post("/infer", json={"inputs": "x"})
    assert resp.status == 500
    assert (await resp.json())["error_type"] == "Incomplete Generation"
    assert "boom" in (await resp.json())["error"]


async def test_health_and_models(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = await make_gateway(one_route("mindie", "openai", upstream.url, model="m"))
    assert (await gw.get("/health")).status == 200
    assert await (await gw.get("/health/timed-10")).json() == {"status": "healthy"}
    assert (await gw.get("/health/timed-601")).status == 404
    models = await (await gw.get("/v1/models")).json()
    assert models["data"][0]["id"] == "m"
