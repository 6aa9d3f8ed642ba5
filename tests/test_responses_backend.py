"""A backend that speaks only the Responses API (`dialect: responses`) behind clients of other
dialects: chat requests become create bodies, its answers, streams, tool calls and errors come
back in the client's own shape."""

from typing import Any

from aiohttp import web

from gateway import jsonutil
from tests.conftest import one_route
from tests.support import Recorded, json_reply, sse_json, sse_reply

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def response(output: list[dict[str, Any]], status: str = "completed", **more: Any) -> dict[str, Any]:
    return {
        "id": "resp_1", "object": "response", "created_at": 1, "status": status, "model": "m", "output": output,
        "usage": {"input_tokens": 7, "output_tokens": 2, "total_tokens": 9,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
        **more,
    }  # fmt: skip


def message(text: str) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip


def event(kind: str, **fields: Any) -> bytes:
    return f"event: {kind}\ndata: ".encode() + jsonutil.dumps({"type": kind, **fields}) + b"\n\n"


async def test_a_chat_client_is_served_by_a_responses_server(upstream, make_gateway):
    upstream.reply = json_reply(response([message("Hello!")]))
    gw = await make_gateway(one_route("openai", "responses", upstream.url))
    body = {
        "model": "m", "max_tokens": 20, "temperature": 0.5, "tools": [WEATHER], "tool_choice": "auto",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
    }  # fmt: skip
    resp = await gw.post("/v1/chat/completions", json=body)
    assert resp.status == 200
    got = await resp.json()
    assert got["choices"][0]["message"]["content"] == "Hello!" and got["choices"][0]["finish_reason"] == "stop"
    assert got["usage"] == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    sent = upstream.last.json
    assert upstream.last.path == "/v1/responses"
    assert sent["instructions"] == "Be brief." and sent["store"] is False
    assert sent["max_output_tokens"] == 20 and sent["temperature"] == 0.5
    assert sent["tools"] == [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    assert sent["input"] == [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    ]


async def test_a_responses_servers_tool_call_stream_reaches_a_chat_client(upstream, make_gateway):
    call = {
        "id": "fc_1",
        "type": "function_call",
        "status": "in_progress",
        "arguments": "",
        "call_id": "c9",
        "name": "get_weather",
    }
    frames = [
        event("response.created", sequence_number=0, response=response([], "in_progress")),
        event("response.output_item.added", sequence_number=1, output_index=0, item=call),
        event("response.function_call_arguments.delta", sequence_number=2, item_id="fc_1", output_index=0, delta='{"city":'),  # noqa: E501
        event("response.function_call_arguments.delta", sequence_number=3, item_id="fc_1", output_index=0, delta='"Oslo"}'),  # noqa: E501
        event("response.completed", sequence_number=4, response=response([{**call, "status": "completed"}])),
    ]  # fmt: skip
    upstream.reply = sse_reply(frames)
    gw = await make_gateway(one_route("openai", "responses", upstream.url))
    body = {"model": "m", "stream": True, "tools": [WEATHER], "messages": [{"role": "user", "content": "x"}]}
    chunks = sse_json(await (await gw.post("/v1/chat/completions", json=body)).read())
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks[:-1]
        if c["choices"] and c["choices"][0]["delta"].get("tool_calls")
    ]
    assert calls[0]["id"] == "c9" and calls[0]["function"]["name"] == "get_weather"
    assert "".join(c["function"]["arguments"] for c in calls) == '{"city":"Oslo"}'
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1] if c["choices"]][-1] == "tool_calls"
    assert chunks[-1] == "[DONE]"


async def test_a_tgi_client_on_a_responses_server_gets_its_text_and_stop_strings_cut_its_way(upstream, make_gateway):
    upstream.reply = json_reply(
        response([message("one two STOP three")], "incomplete", incomplete_details={"reason": "max_output_tokens"})
    )
    gw = await make_gateway(one_route("tgi", "responses", upstream.url))
    resp = await gw.post("/generate", json={"inputs": "count", "parameters": {"max_new_tokens": 5, "stop": ["STOP"]}})
    got = await resp.json()
    assert got["generated_text"] == "one two STOP"  # TGI keeps the stop text, as TGI does
    assert upstream.last.json["input"] == "count" and "stop" not in upstream.last.json


async def test_a_responses_servers_failure_is_the_clients_error(upstream, make_gateway):
    async def refuse(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.json_response({"error": {"message": "model overloaded", "type": "server_error"}}, status=503)

    upstream.reply = refuse
    gw = await make_gateway(one_route("openai", "responses", upstream.url))
    resp = await gw.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert resp.status == 503 and "model overloaded" in (await resp.json())["error"]["message"]
    frames = [
        event("response.created", sequence_number=0, response=response([], "in_progress")),
        event("response.output_text.delta", sequence_number=1, item_id="m", output_index=0, content_index=0, delta="Hi", logprobs=[]),  # noqa: E501
        event("response.failed", sequence_number=2, response=response([], "failed", error={"code": "server_error", "message": "boom"})),  # noqa: E501
    ]  # fmt: skip
    upstream.reply = sse_reply(frames)
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    chunks = sse_json(await (await gw.post("/v1/chat/completions", json=body)).read())
    assert chunks[0]["choices"][0]["delta"]["content"] == "Hi" or chunks[1]["choices"][0]["delta"]["content"] == "Hi"
    assert any(isinstance(c, dict) and "boom" in c.get("error", {}).get("message", "") for c in chunks)


async def test_a_relayed_stream_cut_short_ends_with_the_next_sequence_number(upstream, make_gateway):
    """A Responses client on a Responses server gets the events as they came, then (the server
    gone before its last event) an error event numbered after the last of them, whether the
    events came in one read or one a read."""
    frames = [
        event("response.created", sequence_number=0, response=response([], "in_progress")),
        event("response.output_text.delta", sequence_number=1, item_id="m", output_index=0, content_index=0, delta="a"),
        event("response.output_text.delta", sequence_number=2, item_id="m", output_index=0, content_index=0, delta="b"),
        event("response.output_text.delta", sequence_number=3, item_id="m", output_index=0, content_index=0, delta="c"),
    ]
    gw = await make_gateway(one_route("openai", "responses", upstream.url))
    for reply in (sse_reply(frames), sse_reply([b"".join(frames)]), sse_reply(frames, delay=0.01)):
        upstream.reply = reply
        resp = await gw.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True})
        body = await resp.read()
        assert resp.status == 200 and body.startswith(b"".join(frames))
        last = jsonutil.loads(body.split(b"\n\n")[-2].split(b"data: ", 1)[1])
        assert last["type"] == "error" and last["sequence_number"] == 4
