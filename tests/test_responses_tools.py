"""Tools through the Responses API on a translated route: flat function tools reach a chat
backend as chat tools, the model's tool calls come back as `function_call` items (whole and
streamed), their outputs continue the conversation; freeform and namespaced tools (as Codex
sends them) map both ways; tools the provider runs are dropped with a note, refused when forced."""

from typing import Any

from gateway import jsonutil
from tests.conftest import one_route
from tests.support import json_reply, responses_events, sdk_event, sse_reply

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def chat_route(url: str) -> dict[str, Any]:
    return one_route("openai", "openai", url, options={"responses_api": False})


def chat_answer(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }  # fmt: skip


def call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage is not None:
        body["usage"] = usage
    return b"data: " + jsonutil.dumps(body) + b"\n\n"


async def test_function_tools_go_to_a_chat_backend_and_calls_come_back_as_items(upstream, make_gateway):
    upstream.reply = json_reply(
        chat_answer({"content": None, "tool_calls": [call("get_weather", '{"city":"Oslo"}')]}, "tool_calls")
    )
    gw = await make_gateway(chat_route(upstream.url))
    body = {"model": "m", "input": "weather in Oslo?", "tools": [WEATHER], "tool_choice": "auto"}
    resp = await gw.post("/v1/responses", json=body)
    assert resp.status == 200
    sent = upstream.last.json
    assert sent["tools"] == [
        {"type": "function", "function": {k: WEATHER[k] for k in ("name", "description", "parameters")}}
    ]
    assert sent["tool_choice"] == "auto"
    out = (await resp.json())["output"]
    assert [o["type"] for o in out] == ["function_call"]
    assert out[0]["call_id"] == "call_1" and out[0]["name"] == "get_weather"
    assert out[0]["arguments"] == '{"city":"Oslo"}' and out[0]["id"].startswith("fc_")
    # The call's output continues the turn: the backend sees the call and its result.
    upstream.reply = json_reply(chat_answer({"content": "It is sunny."}))
    follow = {
        "model": "m", "tools": [WEATHER], "previous_response_id": (await resp.json())["id"],
        "input": [{"type": "function_call_output", "call_id": "call_1", "output": "sunny, 20C"}],
    }  # fmt: skip
    resp = await gw.post("/v1/responses", json=follow)
    assert (await resp.json())["output"][0]["content"][0]["text"] == "It is sunny."
    messages = upstream.last.json["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["tool_calls"] == [call("get_weather", '{"city":"Oslo"}')]
    assert messages[2] == {"role": "tool", "content": "sunny, 20C", "tool_call_id": "call_1"}


async def test_streamed_tool_calls_are_function_call_items_with_argument_deltas(upstream, make_gateway):
    frames = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"tool_calls": [{"index": 0, "id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),  # noqa: E501
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}),
        chunk({}, "tool_calls"),
        chunk({}, usage={"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}).replace(b'"choices":[{"index":0,"delta":{},"finish_reason":null}]', b'"choices":[]'),  # noqa: E501
        b"data: [DONE]\n\n",
    ]  # fmt: skip
    upstream.reply = sse_reply(frames)
    gw = await make_gateway(chat_route(upstream.url))
    resp = await gw.post("/v1/responses", json={"model": "m", "input": "x", "tools": [WEATHER], "stream": True})
    events = responses_events(await resp.read())
    for ev in events:
        sdk_event(ev)
    kinds = [ev["type"] for ev in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added, done = events[2]["item"], events[6]["item"]
    assert added["status"] == "in_progress" and added["arguments"] == "" and added["call_id"] == "call_9"
    assert done == {**added, "status": "completed", "arguments": '{"city":"Oslo"}'}
    assert events[5]["arguments"] == '{"city":"Oslo"}' and events[5]["name"] == "get_weather"
    final = events[-1]["response"]
    assert final["output"] == [done]
    assert final["usage"]["input_tokens"] == 5 and final["usage"]["output_tokens"] == 3


CODEX_TOOLS = [
    {"type": "function", "name": "exec_command", "description": "Run a command", "strict": False,
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch",
     "format": {"type": "grammar", "syntax": "lark", "definition": "start: 'x'"}},
    {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents",
     "tools": [{"type": "function", "name": "spawn_agent", "description": "Spawn", "parameters": {"type": "object"}}]},
    {"type": "web_search", "external_web_access": False},
]  # fmt: skip


async def test_codex_tools_map_both_ways_and_a_hosted_tool_is_dropped_with_a_note(upstream, make_gateway):
    calls = [call("apply_patch", '{"input":"*** Begin Patch"}', "c1"), call("multi_agent_v1__spawn_agent", "{}", "c2")]
    upstream.reply = json_reply(chat_answer({"content": None, "tool_calls": calls}, "tool_calls"))
    gw = await make_gateway(chat_route(upstream.url))
    body = {"model": "m", "input": "go", "tools": CODEX_TOOLS, "tool_choice": "auto", "parallel_tool_calls": True}
    resp = await gw.post("/v1/responses", json=body)
    assert resp.status == 200
    assert resp.headers["X-Gateway-Dropped-Params"] == "server_tools"
    names = [t["function"]["name"] for t in upstream.last.json["tools"]]
    assert names == ["exec_command", "apply_patch", "multi_agent_v1__spawn_agent"]
    freeform = upstream.last.json["tools"][1]["function"]["parameters"]
    assert freeform["required"] == ["input"] and "start: 'x'" in freeform["properties"]["input"]["description"]
    out = (await resp.json())["output"]
    assert out[0]["type"] == "custom_tool_call" and out[0]["input"] == "*** Begin Patch"
    assert out[0]["name"] == "apply_patch" and out[0]["call_id"] == "c1"
    assert out[1]["type"] == "function_call" and out[1]["name"] == "spawn_agent"
    assert out[1]["namespace"] == "multi_agent_v1"
    # The calls, sent back as Codex does, reach the backend under the names it gave them.
    upstream.reply = json_reply(chat_answer({"content": "done"}))
    history = [*out, {"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"},
               {"type": "function_call_output", "call_id": "c2", "output": "ok"}]  # fmt: skip
    resp = await gw.post("/v1/responses", json={**body, "input": [{"role": "user", "content": "go"}, *history]})
    assert resp.status == 200
    assistant = upstream.last.json["messages"][1]
    assert assistant["tool_calls"] == [
        call("apply_patch", '{"input":"*** Begin Patch"}', "c1"),
        call("multi_agent_v1__spawn_agent", "{}", "c2"),
    ]


async def test_forcing_a_hosted_tool_on_a_translated_route_is_refused(upstream, make_gateway):
    gw = await make_gateway(chat_route(upstream.url))
    body = {"model": "m", "input": "x", "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}
    resp = await gw.post("/v1/responses", json=body)
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["param"] == "server_tool_choice" and err["code"] == "unsupported_parameter"
    assert upstream.requests == []


async def test_developer_items_and_instructions_are_the_system_turn(upstream, make_gateway):
    upstream.reply = json_reply(chat_answer({"content": "hi"}))
    gw = await make_gateway(chat_route(upstream.url))
    body = {
        "model": "m", "instructions": "Be terse.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Use tools."}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "seen"}]},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"role": "user", "content": "and?"},
        ],
    }  # fmt: skip
    assert (await gw.post("/v1/responses", json=body)).status == 200
    messages = upstream.last.json["messages"]
    assert messages[0] == {"role": "system", "content": "Be terse.\n\nUse tools."}
    assert messages[1]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
    ]
    assert messages[2] == {"role": "assistant", "content": "seen"}
    assert messages[3] == {"role": "user", "content": "and?"}
    assert len(messages) == 4


async def test_reasoning_text_streams_as_a_reasoning_item_before_the_message(upstream, make_gateway):
    frames = [
        chunk({"role": "assistant", "reasoning_content": "Think"}),
        chunk({"reasoning_content": "ing."}),
        chunk({"content": "Answer"}),
        chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]
    upstream.reply = sse_reply(frames)
    gw = await make_gateway(chat_route(upstream.url))
    resp = await gw.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    events = responses_events(await resp.read())
    for ev in events:
        sdk_event(ev)
    kinds = [ev["type"] for ev in events]
    assert kinds[2:9] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    output = events[-1]["response"]["output"]
    assert output[0]["type"] == "reasoning" and output[0]["content"] == [
        {"type": "reasoning_text", "text": "Thinking."}
    ]
    assert output[1]["type"] == "message" and output[1]["content"][0]["text"] == "Answer"
    assert [ev["output_index"] for ev in events if ev["type"] == "response.output_text.delta"] == [1]
