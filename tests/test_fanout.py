"""Fan-out: batches of prompts and n > 1 choices for backends that take one prompt and make one
choice per request (TGI here), answered by several upstream requests put back together."""

import asyncio

from aiohttp import web

from gateway import jsonutil
from tests.conftest import one_route
from tests.support import Recorded, sse_json, sse_reply


def tgi_answer(text: str) -> bytes:
    return jsonutil.dumps(
        {"generated_text": text, "details": {"finish_reason": "length", "generated_tokens": 2, "seed": None}}
    )


async def test_batch_fans_out_and_keeps_prompt_order(upstream, make_gateway):
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.Response(body=tgi_answer(" for " + rec.json["inputs"]), content_type="application/json")

    upstream.reply = reply
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": ["a", "b", "c"], "max_tokens": 2})
    assert resp.status == 200
    body = await resp.json()
    assert [(c["index"], c["text"], c["finish_reason"]) for c in body["choices"]] == [
        (0, " for a", "length"),
        (1, " for b", "length"),
        (2, " for c", "length"),
    ]
    assert sorted(r.json["inputs"] for r in upstream.requests) == ["a", "b", "c"]


async def test_one_failing_prompt_fails_the_batch_with_that_error(upstream, make_gateway):
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        if rec.json["inputs"] == "b":
            body = jsonutil.dumps({"error": "Input validation error: too long", "error_type": "validation"})
            return web.Response(status=422, body=body, content_type="application/json")
        return web.Response(body=tgi_answer(" ok"), content_type="application/json")

    upstream.reply = reply
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": ["a", "b"], "max_tokens": 2})
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["type"] == "invalid_request_error"
    assert "too long" in err["message"]
    # and the gateway keeps serving
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "a", "max_tokens": 2})
    assert resp.status == 200


def tgi_frames(words: list[str], finish: str = "length") -> list[bytes]:
    frames = []
    for i, w in enumerate(words, 1):
        last = i == len(words)
        details = (
            b'{"finish_reason":"%b","generated_tokens":%d,"seed":null,"input_length":1}' % (finish.encode(), i)
            if last
            else b"null"
        )
        gen = jsonutil.dumps("".join(words)) if last else b"null"
        frames.append(
            b'data:{"index":%d,"token":{"id":%d,"text":%b,"logprob":null,"special":false},'
            b'"generated_text":%b,"details":%b}\n\n' % (i, i, jsonutil.dumps(w), gen, details)
        )
    return frames


async def test_streamed_batch_is_merged_with_prompt_indexes(upstream, make_gateway):
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return await sse_reply(tgi_frames([" to", " " + rec.json["inputs"]]))(request, rec)

    upstream.reply = reply
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    resp = await gw.post(
        "/v1/completions",
        json={"model": "m", "prompt": ["a", "b"], "stream": True, "stream_options": {"include_usage": True}},
    )
    assert resp.status == 200
    events = sse_json(await resp.read())
    assert events[-1] == "[DONE]"
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    for e in events[:-1]:
        for c in e["choices"]:
            texts[c["index"]] = texts.get(c["index"], "") + c["text"]
            if c["finish_reason"]:
                finishes[c["index"]] = c["finish_reason"]
    assert texts == {0: " to a", 1: " to b"}
    assert finishes == {0: "length", 1: "length"}
    # One usage chunk at the end, summed over the parts.
    assert events[-2]["choices"] == [] and events[-2]["usage"] == {
        "prompt_tokens": 2,
        "completion_tokens": 4,
        "total_tokens": 6,
    }


async def test_n_choices_are_one_request_each_with_offset_seeds(upstream, make_gateway):
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        seed = rec.json["parameters"]["seed"]
        return web.Response(body=tgi_answer(f" seed {seed}"), content_type="application/json")

    upstream.reply = reply
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    resp = await gw.post(
        "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 3, "seed": 7, "max_tokens": 2},
    )
    # Chat needs a template for TGI; completions carry n just the same.
    assert resp.status == 400
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "hi", "n": 3, "seed": 7, "max_tokens": 2})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert [(c["index"], c["text"]) for c in body["choices"]] == [(0, " seed 7"), (1, " seed 8"), (2, " seed 9")]
    assert len(upstream.requests) == 3
    assert all("n" not in r.json["parameters"] and "best_of" not in r.json["parameters"] for r in upstream.requests)


async def test_n_streamed_choices_are_merged(upstream, make_gateway):
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return await sse_reply(tgi_frames([" x", " y"]))(request, rec)

    upstream.reply = reply
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "hi", "n": 2, "stream": True})
    events = sse_json(await resp.read())
    texts: dict[int, str] = {}
    for e in events[:-1]:
        for c in e["choices"]:
            texts[c["index"]] = texts.get(c["index"], "") + c["text"]
    assert texts == {0: " x y", 1: " x y"}
    assert len(upstream.requests) == 2


async def test_n_stays_one_request_where_the_backend_takes_it(upstream, make_gateway):
    from tests.support import json_reply

    upstream.reply = json_reply(
        {
            "id": "c",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [
                {"index": 0, "text": " a", "finish_reason": "stop"},
                {"index": 1, "text": " b", "finish_reason": "stop"},
            ],
        }
    )
    gw = await make_gateway(one_route("tgi", "openai", upstream.url))
    resp = await gw.post("/generate", json={"inputs": "hi", "parameters": {"max_new_tokens": 2}})
    assert resp.status == 200
    assert len(upstream.requests) == 1


async def test_client_leaving_a_merged_stream_closes_every_upstream_request(upstream, make_gateway):
    closed = []

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_type = "text/event-stream"
        await resp.prepare(request)
        try:
            while True:  # keep-alives only: the gateway is still waiting for a first token
                await resp.write(b": waiting\n\n")
                await asyncio.sleep(0.02)
        except (ConnectionResetError, asyncio.CancelledError):
            closed.append(rec)
            raise

    upstream.reply = reply
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    call = asyncio.create_task(gw.post("/v1/completions", json={"model": "m", "prompt": "hi", "n": 2, "stream": True}))

    async def until(cond) -> None:
        while not cond():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(until(lambda: len(upstream.requests) == 2), 5)
    call.cancel()
    await asyncio.wait_for(until(lambda: len(closed) == 2), 5)
