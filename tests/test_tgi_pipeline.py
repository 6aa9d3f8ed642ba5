"""TGI both ways through a running gateway, with the `text-generation` client as a real client."""

from pathlib import Path
from typing import Any

import pytest
import text_generation
from text_generation.errors import ValidationError

from gateway import jsonutil
from tests.conftest import one_route
from tests.support import FakeUpstream, json_reply, raw_reply, sse_json, sse_reply

FIX = Path(__file__).parent / "fixtures" / "tgi"

CHAT_CHUNKS = [
    {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": t, "finish_reason": None}]}
    for t in (" am", " a", " French")
] + [
    {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": "", "finish_reason": "length"}]},
    {"id": "c", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}},
]
OPENAI_FRAMES = [b"data: " + jsonutil.dumps(c) + b"\n\n" for c in CHAT_CHUNKS] + [b"data: [DONE]\n\n"]
OPENAI_COMPLETION = {
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "text": " am a French", "finish_reason": "length", "logprobs": None}],
    "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
}


async def test_text_generation_client_generate(make_gateway: Any, upstream: FakeUpstream) -> None:
    upstream.reply = json_reply(OPENAI_COMPLETION)
    gw = await make_gateway(one_route("tgi", "openai", upstream.url, model="m"))
    client = text_generation.AsyncClient(str(gw.make_url("/")))
    out = await client.generate("My name is Olivier and I", max_new_tokens=3, seed=4)
    assert out.generated_text == " am a French"
    assert out.details.finish_reason == "length" and out.details.generated_tokens == 3 and out.details.seed == 4
    assert upstream.last.json == {
        "model": "m",
        "prompt": "My name is Olivier and I",
        "seed": 4,
        "max_tokens": 3,
        "temperature": 0.0,
    }


async def test_text_generation_client_stream(make_gateway: Any, upstream: FakeUpstream) -> None:
    upstream.reply = sse_reply(OPENAI_FRAMES)
    gw = await make_gateway(one_route("tgi", "openai", upstream.url, model="m"))
    client = text_generation.AsyncClient(str(gw.make_url("/")))
    got = [r async for r in client.generate_stream("My name is", max_new_tokens=3, top_k=5)]
    assert [r.token.text for r in got] == [" am", " a", " French"]
    assert got[-1].generated_text == " am a French"
    assert got[-1].details is not None and got[-1].details.finish_reason == "length"


async def test_text_generation_client_against_mindie_prefix(make_gateway: Any, upstream: FakeUpstream) -> None:
    upstream.reply = sse_reply(OPENAI_FRAMES)
    config = one_route("mindie", "openai", upstream.url, model="m")
    config["routes"][0]["prefix"] = "/mindie"
    config["backends"]["up"]["options"] = {"extensions": "vllm"}
    gw = await make_gateway(config)
    # MindIE's TGI route carries no token ids from an OpenAI backend (null, never invented),
    # which the text-generation client refuses; the raw wire is checked instead.
    resp = await gw.post("/mindie/generate_stream", json={"inputs": "My name is", "parameters": {"details": True}})
    events = sse_json(await resp.read())
    assert events[-1]["details"] == {"prompt_tokens": 7, "finish_reason": "length", "generated_tokens": 3, "seed": None}
    assert "index" not in events[0]
    assert upstream.last.json["max_tokens"] == 20


async def test_text_generation_client_against_mindie_simulator(make_gateway: Any) -> None:
    config = {
        "backends": {"sim": {"dialect": "mindie", "simulate": True}},
        "routes": [{"name": "r", "dialect": "mindie", "backend": "sim", "prefix": "/mindie"}],
    }
    gw = await make_gateway(config)
    client = text_generation.AsyncClient(str(gw.make_url("/mindie/generate_stream")))
    got = [r async for r in client.generate_stream("hello there", max_new_tokens=4)]
    assert "".join(r.token.text for r in got) == got[-1].generated_text == "Simulated answer 0: you"
    with pytest.raises(ValidationError):
        await text_generation.AsyncClient(str(gw.make_url("/mindie/"))).generate("x", top_p=1.0)


async def test_openai_to_tgi_stream(make_gateway: Any, upstream: FakeUpstream) -> None:
    upstream.reply = sse_reply([f + b"\n\n" for f in (FIX / "generate_stream.txt").read_bytes().split(b"\n\n") if f])
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    resp = await gw.post(
        "/v1/completions",
        json={"model": "m", "prompt": "My name is", "stream": True, "temperature": 0, "top_p": 1.0, "max_tokens": 9},
    )
    events = sse_json(await resp.read())
    text = "".join(c["choices"][0]["text"] for c in events if isinstance(c, dict) and c.get("choices"))
    assert text == " am a French"
    assert events[-1] == "[DONE]"
    assert upstream.last.path == "/generate_stream"
    assert upstream.last.json == {
        "inputs": "My name is",
        "parameters": {"max_new_tokens": 9, "do_sample": False, "details": True, "return_full_text": False},
    }


async def test_openai_to_tgi_whole_answer_cuts_stop(make_gateway: Any, upstream: FakeUpstream) -> None:
    reply = jsonutil.loads((FIX / "generate_response.json").read_bytes())
    reply["generated_text"] = " am a French\n"
    reply["details"]["finish_reason"] = "stop_sequence"
    upstream.reply = json_reply(reply)
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "x", "stop": ["\n"], "max_tokens": 20})
    out = await resp.json()
    assert out["choices"][0]["text"] == " am a French"
    assert out["choices"][0]["finish_reason"] == "stop"
    assert upstream.last.json["parameters"]["stop"] == ["\n"]


async def test_tgi_inband_error_is_midstream(make_gateway: Any, upstream: FakeUpstream) -> None:
    upstream.reply = sse_reply([(FIX / "stream_error.txt").read_bytes()])
    gw = await make_gateway(one_route("tgi", "tgi", upstream.url))
    resp = await gw.post("/generate_stream", json={"inputs": "x"})
    assert resp.status == 424
    err = await resp.json()
    assert err["error_type"] == "generation" and "top_p" in err["error"]


async def test_tgi_error_status_kept(make_gateway: Any, upstream: FakeUpstream) -> None:
    upstream.reply = raw_reply((FIX / "error_overloaded.json").read_bytes(), status=429)
    gw = await make_gateway(one_route("tgi", "tgi", upstream.url))
    resp = await gw.post("/generate", json={"inputs": "x"})
    assert resp.status == 429
    assert await resp.json() == {
        "error": "backend 'up' answered 429: Model is overloaded",
        "error_type": "overloaded",
    }


async def test_tgi_bad_inputs_422(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = await make_gateway(one_route("tgi", "openai", upstream.url))
    for path, body in [
        ("/generate", b"{"),
        ("/generate_stream", b'{"inputs": 5}'),
        ("/", b'{"inputs": "x", "parameters": {"top_p": 1.0}}'),
        ("/generate", b'{"inputs": "x", "parameters": {"stop": ["a","b","c","d","e"]}}'),
    ]:
        resp = await gw.post(path, data=body)
        assert resp.status == 422, path
        assert (await resp.json())["error_type"] == "validation"
    info = await (await gw.get("/info")).json()
    assert info["model_pipeline_tag"] == "text-generation"
