"""Anthropic clients in front of other backends, and other clients in front of an Anthropic
backend, through the whole gateway with a scripted upstream: what each side is sent, what each
client gets, errors before and after a stream starts."""

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import anthropic
import openai
from aiohttp import web

from gateway import jsonutil
from tests.conftest import one_route
from tests.support import Recorded, json_reply, raw_reply, sse_json, sse_reply

FIX = Path(__file__).parent / "fixtures" / "anthropic"
TOOLS = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {}}}]


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    obj: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "model": "up", "choices": []}
    if delta or finish:
        obj["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage:
        obj["usage"] = usage
    return b"data: " + jsonutil.dumps(obj) + b"\n\n"


def _tool_call_then_text() -> Any:
    """An OpenAI server that answers the first turn with a tool call and the next with text."""

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        body = rec.json
        if any(m["role"] == "tool" for m in body["messages"]):
            return await sse_reply(
                [_chunk({"role": "assistant", "content": "It is sunny."}), _chunk({}, "stop"),
                 _chunk({}, usage={"prompt_tokens": 30, "completion_tokens": 4}), b"data: [DONE]\n\n"]
            )(request, rec)  # fmt: skip
        call = {"index": 0, "id": "call_7", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
        return await sse_reply(
            [_chunk({"role": "assistant", "tool_calls": [call]}),
             _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
             _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
             _chunk({}, "tool_calls"), _chunk({}, usage={"prompt_tokens": 20, "completion_tokens": 9}),
             b"data: [DONE]\n\n"]
        )(request, rec)  # fmt: skip

    return reply


async def test_an_openai_backends_tool_call_is_a_tool_use_and_its_result_continues(upstream, make_gateway):
    upstream.reply = _tool_call_then_text()
    gw = await make_gateway(one_route("anthropic", "openai", upstream.url, model="up", options={"extensions": "vllm"}))
    client = anthropic.AsyncAnthropic(base_url=str(gw.make_url("")).rstrip("/"), api_key="k", max_retries=0)
    ask: dict[str, Any] = {
        "model": "claude-x",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "Be useful.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Weather?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
        ]}],
        "tools": TOOLS,
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "thinking": {"type": "enabled", "budget_tokens": 2000},
        "metadata": {"user_id": "u-1"},
        "stop_sequences": ["###"],
        "extra_body": {"top_k": 5},
    }  # fmt: skip
    async with client.messages.stream(**ask) as stream:
        first = await stream.get_final_message()
    assert first.stop_reason == "tool_use" and first.usage.output_tokens == 9
    (use,) = first.content
    assert use.type == "tool_use" and use.id == "toolu_call_7" and use.input == {"city": "Paris"}
    sent = upstream.last.json
    assert sent["messages"] == [
        {"role": "system", "content": "Be useful."},
        {"role": "user", "content": [
            {"type": "text", "text": "Weather?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
        ]},
    ]  # fmt: skip
    function = {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {}}}
    assert sent["tools"] == [{"type": "function", "function": function}]
    assert sent["tool_choice"] == "required" and sent["parallel_tool_calls"] is False
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}
    assert sent["user"] == "u-1" and sent["stop"] == ["###"] and sent["top_k"] == 5 and sent["max_tokens"] == 100
    turn = [
        *ask["messages"],
        {"role": "assistant", "content": [use.model_dump()]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": "21 C"}],
             "is_error": False},
            {"type": "text", "text": "and now?"},
        ]},
    ]  # fmt: skip
    async with client.messages.stream(**{**ask, "messages": turn}) as stream:
        after = await stream.get_final_message()
    assert [b.type for b in after.content] == ["text"] and after.stop_reason == "end_turn"
    sent = upstream.last.json["messages"]
    call = {
        "id": "toolu_call_7",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
    }
    assert sent[2] == {"role": "assistant", "content": None, "tool_calls": [call]}
    assert sent[3] == {"role": "tool", "content": "21 C", "tool_call_id": "toolu_call_7"}
    assert sent[4] == {"role": "user", "content": "and now?"}


async def test_the_stop_string_vllm_names_is_the_stop_sequence(upstream, make_gateway):
    """vLLM says which stop string ended a choice (`stop_reason`); Anthropic's clients get it as
    `stop_sequence`, whole and streamed, even when several were asked for."""
    gw = await make_gateway(one_route("anthropic", "openai", upstream.url, model="up", options={"extensions": "vllm"}))
    client = anthropic.AsyncAnthropic(base_url=str(gw.make_url("")).rstrip("/"), api_key="k", max_retries=0)
    ask: dict[str, Any] = {"model": "m", "max_tokens": 50, "stop_sequences": ["###", "END"],
                           "messages": [{"role": "user", "content": "Count"}]}  # fmt: skip
    upstream.reply = json_reply({
        "id": "c1", "object": "chat.completion", "created": 1, "model": "up",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "1 2 3"}, "finish_reason": "stop",
                     "stop_reason": "END"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    })  # fmt: skip
    whole = await client.messages.create(**ask)
    assert whole.stop_reason == "stop_sequence" and whole.stop_sequence == "END"
    ended = {"id": "c1", "object": "chat.completion.chunk", "model": "up",
             "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "END"}]}  # fmt: skip
    frames = [_chunk({"role": "assistant", "content": "1 2 3"}), b"data: " + jsonutil.dumps(ended) + b"\n\n"]
    upstream.reply = sse_reply([*frames, b"data: [DONE]\n\n"])
    async with client.messages.stream(**ask) as stream:
        streamed = await stream.get_final_message()
    assert streamed.stop_reason == "stop_sequence" and streamed.stop_sequence == "END"


def _frames(name: str) -> list[bytes]:
    return [f + b"\n\n" for f in (FIX / name).read_bytes().split(b"\n\n") if f.strip()]


async def test_an_openai_client_reaches_an_anthropic_backend(upstream, make_gateway):
    upstream.reply = sse_reply(_frames("sdk_tool_use_stream.sse"))
    config = one_route("openai", "anthropic", upstream.url, model="claude-sonnet-4", headers={"x-api-key": "sk-ant"})
    gw = await make_gateway(config)
    client = openai.AsyncOpenAI(base_url=str(gw.make_url("/v1")), api_key="k", max_retries=0)
    stream = await client.chat.completions.create(
        model="gpt", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Paris?"}],
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        stream=True, n=1,
    )  # fmt: skip
    text, args, finish = "", "", None
    async for chunk in stream:
        for c in chunk.choices:
            text += c.delta.content or ""
            for tc in c.delta.tool_calls or ():
                args += tc.function.arguments or "" if tc.function else ""
            finish = c.finish_reason or finish
    assert text == "I'll check the current weather in Paris for you."
    assert jsonutil.loads(args) == {"location": "Paris"} and finish == "tool_calls"
    sent = upstream.last
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == "sk-ant"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.json["system"] == "Be brief." and sent.json["max_tokens"] == 4096
    assert sent.json["tools"] == [{"name": "get_weather", "input_schema": {"type": "object"}}]
    upstream.reply = raw_reply((FIX / "vllm_stop_sequence.json").read_bytes())
    whole = await client.chat.completions.create(model="gpt", messages=[{"role": "user", "content": "x"}], stop=["a"])
    assert whole.choices[0].finish_reason == "stop" and whole.usage and whole.usage.prompt_tokens == 19
    assert upstream.last.json["stop_sequences"] == ["a"]


async def test_an_anthropic_backends_errors_reach_other_clients_in_their_shape(upstream, make_gateway):
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    upstream.reply = json_reply(body, status=529)
    gw = await make_gateway(one_route("openai", "anthropic", upstream.url, model="c"))
    resp = await gw.post("/v1/chat/completions", json={"model": "c", "messages": [{"role": "user", "content": "x"}]})
    assert resp.status == 529 and "Overloaded" in (await resp.json())["error"]["message"]
    mid = [
        *_frames("sdk_basic_stream.sse")[:3],
        b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"boom"}}\n\n',
    ]
    upstream.reply = sse_reply(mid)
    resp = await gw.post(
        "/v1/chat/completions", json={"model": "c", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    )
    events = sse_json(await resp.read())
    assert "boom" in events[-2]["error"]["message"] and events[-1] == "[DONE]"


async def test_errors_are_anthropics_before_and_after_a_stream_starts(upstream, make_gateway):
    gw = await make_gateway({**one_route("anthropic", "openai", upstream.url), "auth": {"api_keys": ["k"]}})
    key = {"x-api-key": "k"}
    resp = await gw.post(
        "/v1/messages", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}, headers=key
    )
    assert resp.status == 400
    err = await resp.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in err["error"]["message"]
    resp = await gw.post("/v1/messages", json={"model": "m", "max_tokens": 5, "messages": []})
    assert resp.status == 401 and (await resp.json())["error"]["type"] == "authentication_error"
    resp = await gw.get("/v1/nothing", headers=key)
    assert resp.status == 404 and (await resp.json())["error"]["type"] == "not_found_error"
    ask = {"model": "m", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    upstream.reply = json_reply({"error": {"message": "too busy"}}, status=429)
    resp = await gw.post("/v1/messages", json=ask, headers=key)
    assert resp.status == 429 and (await resp.json())["error"]["type"] == "rate_limit_error"
    upstream.reply = sse_reply([_chunk({"content": "Hi"}), b'data: {"error": {"message": "engine died"}}\n\n'])
    resp = await gw.post("/v1/messages", json=ask, headers=key)
    assert resp.status == 200
    body = await resp.read()
    assert body.endswith(
        b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
        b'"message":"backend error mid-stream: engine died"}}\n\n'
    )
    assert b"message_stop" not in body
    resp = await gw.post(
        "/v1/messages", json={**ask, "messages": [{"role": "user", "content": [{"type": "document"}]}]}, headers=key
    )
    assert resp.status == 400 and "document" in (await resp.json())["error"]["message"]


async def test_a_silent_backend_gets_the_client_pings(upstream, make_gateway, monkeypatch):
    from gateway.dialects.anthropic import render

    monkeypatch.setattr(render.MessageStream, "ping_every_s", 0.01)
    saw_ping = asyncio.Event()

    async def silent(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        with contextlib.suppress(TimeoutError):  # without pings, the test fails rather than hangs
            await asyncio.wait_for(saw_ping.wait(), 5)
        for frame in (_chunk({"content": "Hi"}), _chunk({}, "stop"), b"data: [DONE]\n\n"):
            await resp.write(frame)
        await resp.write_eof()
        return resp

    upstream.reply = silent
    gw = await make_gateway(one_route("anthropic", "openai", upstream.url))
    ask = {"model": "m", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    resp = await gw.post("/v1/messages", json=ask)
    assert resp.status == 200
    lines = []
    while line := await resp.content.readline():
        lines.append(line)
        if line == b"event: ping\n":
            saw_ping.set()
    names = [line[7:-1].decode() for line in lines if line.startswith(b"event: ")]
    assert names[:2] == ["message_start", "ping"]
    assert names[-1] == "message_stop" and "content_block_delta" in names


async def test_claude_codes_probes_and_betas_are_answered(upstream, make_gateway):
    gw = await make_gateway({**one_route("anthropic", "openai", upstream.url), "auth": {"api_keys": ["k"]}})
    assert (await gw.head("/")).status == 200
    assert (await gw.get("/api/hello")).status == 200
    models = await (await gw.get("/v1/models", headers={"Authorization": "Bearer k"})).json()
    assert models["data"][0]["type"] == "model" and models["has_more"] is False


async def test_silences_mid_stream_get_pings_and_lose_no_token(upstream, make_gateway, monkeypatch):
    """A silence interrupts the read it falls in (one timer a stream, not one a read): what came
    before it, half an event included, is read on afterwards, every token in order."""
    from gateway.dialects.anthropic import render

    monkeypatch.setattr(render.MessageStream, "ping_every_s", 0.02)
    words = [f"w{n} " for n in range(12)]

    async def halting(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for n, word in enumerate(words):
            frame = _chunk({"content": word})
            if n % 3 == 2:
                await resp.write(frame[:9])  # half an event, then a silence
                await asyncio.sleep(0.07)
                await resp.write(frame[9:])
            else:
                await resp.write(frame)
                await asyncio.sleep(0.001)
        for frame in (_chunk({}, "stop"), b"data: [DONE]\n\n"):
            await resp.write(frame)
        await resp.write_eof()
        return resp

    upstream.reply = halting
    gw = await make_gateway(one_route("anthropic", "openai", upstream.url))
    ask = {"model": "m", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    resp = await gw.post("/v1/messages", json=ask)
    assert resp.status == 200
    body = await resp.read()
    names = [line[7:].decode() for line in body.split(b"\n") if line.startswith(b"event: ")]
    assert names.count("ping") >= 4 and names[-1] == "message_stop"
    texts = [
        json.loads(line[6:])["delta"]["text"]
        for line in body.split(b"\n")
        if line.startswith(b"data: ") and b'"text_delta"' in line
    ]
    assert "".join(texts) == "".join(words)
