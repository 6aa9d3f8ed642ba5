"""The Responses API through an OpenAI route in front of every backend dialect (simulated), as the
`openai` SDK uses it: create, stream (each event read by the SDK's own types), continue with
`previous_response_id`, retrieve, stream again, list input items, delete."""

from typing import Any

import openai
import pytest

from tests.support import responses_events, sdk_event

# Each backend dialect, with the options that make its simulated server answer chat.
BACKENDS: dict[str, dict[str, Any]] = {
    "openai-passthrough": {"dialect": "openai"},
    "openai-chat": {"dialect": "openai", "options": {"responses_api": False}},
    "tgi": {"dialect": "tgi", "tokenizer": True},
    "triton": {"dialect": "triton", "tokenizer": True},
    "mindie": {"dialect": "mindie", "tokenizer": True},
    "databricks": {"dialect": "databricks", "model": "sim"},
    "responses": {"dialect": "responses"},
}


def config(backend: dict[str, Any], tokenizer: str, **more: Any) -> dict[str, Any]:
    b = {**backend, "simulate": True}
    if b.pop("tokenizer", False):
        b["tokenizer"] = tokenizer
    return {"backends": {"up": b}, "routes": [{"name": "r", "dialect": "openai", "backend": "up"}], **more}


def sdk(client: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="k", base_url=str(client.make_url("/v1")), max_retries=0, timeout=10)


@pytest.fixture(params=sorted(BACKENDS))
async def gw(request, make_gateway, tokenizer_folder):
    return await make_gateway(config(BACKENDS[request.param], str(tokenizer_folder)))


async def test_create_answers_a_response_object(gw):
    async with sdk(gw) as c:
        r = await c.responses.create(model="sim", input="hello there", instructions="Be brief.")
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status == "completed" and r.output_text
    assert r.output[0].type == "message" and r.output[0].content[0].type == "output_text"
    assert r.usage is not None and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


async def test_a_stream_is_read_event_by_event_by_the_sdk(gw):
    resp = await gw.post("/v1/responses", json={"model": "sim", "input": "hello there", "stream": True})
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    events = responses_events(await resp.read())
    for ev in events:
        sdk_event(ev)
    assert [ev["sequence_number"] for ev in events] == list(range(len(events)))
    kinds = [ev["type"] for ev in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    text = "".join(ev["delta"] for ev in events if ev["type"] == "response.output_text.delta")
    assert text and events[-1]["response"]["output"][0]["content"][0]["text"] == text
    async with sdk(gw) as c, c.responses.stream(model="sim", input="hello there") as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert final.output_text == text


async def test_a_conversation_continues_and_is_kept(gw):
    async with sdk(gw) as c:
        first = await c.responses.create(model="sim", input="my name is Ada")
        second = await c.responses.create(model="sim", input="what is my name?", previous_response_id=first.id)
        items = await c.responses.input_items.list(second.id, order="asc")
        roles = [(i.type, i.role) for i in items.data]
        assert roles == [("message", "user"), ("message", "assistant"), ("message", "user")]
        assert (await c.responses.retrieve(first.id)).output_text == first.output_text
        replayed = [ev async for ev in await c.responses.retrieve(first.id, stream=True)]
        assert replayed[-1].type == "response.completed"
        await c.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(first.id)
        # The second keeps the whole conversation: it goes on without the first.
        third = await c.responses.create(model="sim", input="and again", previous_response_id=second.id)
        assert third.output_text


async def test_an_unknown_previous_response_is_a_404_in_openais_shape(gw):
    resp = await gw.post("/v1/responses", json={"model": "sim", "input": "x", "previous_response_id": "resp_no"})
    assert resp.status == 404
    body = await resp.json()
    assert body["error"]["param"] == "previous_response_id"
    assert body["error"]["type"] == "invalid_request_error"
    assert "resp_no" in body["error"]["message"]


async def test_store_false_keeps_nothing(gw):
    async with sdk(gw) as c:
        r = await c.responses.create(model="sim", input="hello", store=False)
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(r.id)


async def test_what_a_backend_cannot_carry_is_named_or_refused(make_gateway, tokenizer_folder):
    gw = await make_gateway(config(BACKENDS["tgi"], str(tokenizer_folder)))
    body = {"model": "sim", "input": "hi", "reasoning": {"effort": "low"}, "tools": [{"type": "web_search"}]}
    resp = await gw.post("/v1/responses", json=body)
    assert resp.status == 200
    assert resp.headers["X-Gateway-Dropped-Params"] == "reasoning_effort,server_tools"
    tools = {**body, "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]}
    refused = await gw.post("/v1/responses", json=tools)
    assert refused.status == 400 and (await refused.json())["error"]["param"] == "tools"
