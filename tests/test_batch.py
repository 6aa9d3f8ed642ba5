"""Batch completions fanned out to a backend that takes one prompt per request."""

from aiohttp import web

from gateway import jsonutil
from tests.conftest import one_route
from tests.support import Recorded


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


async def test_streaming_a_fanned_out_batch_is_refused(upstream, make_gateway):
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": ["a", "b"], "stream": True})
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "batch_stream_unsupported"
    assert upstream.requests == []
