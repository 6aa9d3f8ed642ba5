"""Tool calls through an OpenAI route in front of every backend dialect (simulated): natively where
the backend's wire has tools, emulated through the chat template and the backend's `tool_parser:`
where it carries only text, refused where a tool choice cannot be kept; whole and streamed, and a
second turn that answers with what the tool said."""

from typing import Any

import openai
import pytest

from gateway.adapters.toolcalls import PARSERS
from tests.tokenizer_kit import tokenizer_folder_fixture  # noqa: F401

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    },
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
HERMES = {"tool_parser": "hermes", "tokenizer": True}
# Each backend dialect as a simulated server, and whether it can hold an answer to calls.
BACKENDS: dict[str, tuple[dict[str, Any], bool]] = {
    "openai": ({"dialect": "openai"}, True),
    "mindie-openai-route": ({"dialect": "mindie"}, True),
    "mindie-native": ({"dialect": "mindie", **HERMES}, False),
    "databricks": ({"dialect": "databricks", "model": "sim"}, True),
    "anthropic": ({"dialect": "anthropic"}, True),
    "responses": ({"dialect": "responses"}, True),
    "tgi": ({"dialect": "tgi", **HERMES}, True),
    "triton-trtllm": ({"dialect": "triton", "options": {"flavor": "trtllm"}, **HERMES}, True),
    "triton-vllm": ({"dialect": "triton", "options": {"flavor": "vllm"}, **HERMES}, True),
    "triton-mindie": ({"dialect": "triton", "options": {"flavor": "mindie"}, **HERMES}, False),
}


def config(backend: dict[str, Any], tokenizer: str) -> dict[str, Any]:
    b = {**backend, "simulate": True}
    if b.pop("tokenizer", False):
        b["tokenizer"] = tokenizer
    return {"backends": {"up": b}, "routes": [{"name": "r", "dialect": "openai", "backend": "up"}]}


def sdk(client: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="k", base_url=str(client.make_url("/v1")), max_retries=0, timeout=10)


@pytest.fixture(params=sorted(BACKENDS))
async def backend(request, make_gateway, tokenizer_folder):
    conf, forcible = BACKENDS[request.param]
    gw = await make_gateway(config(conf, str(tokenizer_folder)))
    return gw, forcible


async def streamed(c: openai.AsyncOpenAI, **ask: Any) -> tuple[str | None, str, list[tuple[str, str, str]]]:
    """A streamed answer put together: its finish, its text, its calls (id, name, arguments)."""
    finish, text, calls = None, "", {}
    async for chunk in await c.chat.completions.create(model="m", stream=True, **ask):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or ():
                if tc.index not in calls:
                    assert tc.id and tc.function and tc.function.name  # the first delta names the call
                    calls[tc.index] = [tc.id, tc.function.name, ""]
                calls[tc.index][2] += (tc.function.arguments if tc.function else None) or ""
            finish = choice.finish_reason or finish
    return finish, text, [tuple(calls[k]) for k in sorted(calls)]


CHOICES = {
    "auto": "auto",
    "required": "required",
    "named": {"type": "function", "function": {"name": "get_weather"}},
}


@pytest.mark.parametrize("choice", sorted(CHOICES))
async def test_a_tool_is_called_whole_and_streamed(backend, choice):
    gw, forcible = backend
    ask = {"messages": ASK, "tools": TOOLS, "tool_choice": CHOICES[choice]}
    async with sdk(gw) as c:
        if choice != "auto" and not forcible:
            with pytest.raises(openai.BadRequestError) as e:
                await c.chat.completions.create(model="m", **ask)
            assert "backend 'up'" in e.value.message and "tool_choice" in e.value.message
            return
        whole = await c.chat.completions.create(model="m", **ask)
        finish, text, calls = await streamed(c, **ask)
    (call,) = whole.choices[0].message.tool_calls or ()
    assert whole.choices[0].finish_reason == "tool_calls" == finish
    assert call.function.name == "get_weather" and call.function.arguments == '{"city":"Paris"}'
    assert [(name, args) for _, name, args in calls] == [("get_weather", '{"city":"Paris"}')]
    assert not (whole.choices[0].message.content or "").strip() and not text.strip()


async def test_tool_choice_none_answers_in_text(backend):
    gw, _ = backend
    async with sdk(gw) as c:
        whole = await c.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="none")
        finish, text, calls = await streamed(c, messages=ASK, tools=TOOLS, tool_choice="none")
    assert whole.choices[0].finish_reason == "stop" == finish
    assert not whole.choices[0].message.tool_calls and not calls
    assert whole.choices[0].message.content and text


async def test_the_tools_result_is_used_in_the_second_turn(backend):
    gw, _ = backend
    async with sdk(gw) as c:
        first = await c.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
        (call,) = first.choices[0].message.tool_calls or ()
        turn = [
            *ASK,
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
        ]
        second = await c.chat.completions.create(model="m", messages=turn, tools=TOOLS)
        finish, text, calls = await streamed(c, messages=turn, tools=TOOLS)
    assert second.choices[0].finish_reason == "stop" == finish and not calls
    assert "sunny, 21 C" in (second.choices[0].message.content or "") and "sunny, 21 C" in text


async def test_a_message_that_names_no_tool_is_answered_in_text(backend):
    gw, _ = backend
    ask = [{"role": "user", "content": "Hello there"}]
    async with sdk(gw) as c:
        whole = await c.chat.completions.create(model="m", messages=ask, tools=TOOLS)
    assert whole.choices[0].finish_reason == "stop" and not whole.choices[0].message.tool_calls


async def test_a_text_backend_without_a_tool_parser_refuses_tools(make_gateway, tokenizer_folder):
    gw = await make_gateway(config({"dialect": "tgi", "tokenizer": True}, str(tokenizer_folder)))
    async with sdk(gw) as c:
        with pytest.raises(openai.BadRequestError) as e:
            await c.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    assert "cannot honour: tools" in e.value.message


async def test_several_choices_each_read_for_calls(make_gateway, tokenizer_folder):
    gw = await make_gateway(config({"dialect": "tgi", **HERMES}, str(tokenizer_folder)))
    async with sdk(gw) as c:
        whole = await c.chat.completions.create(model="m", messages=ASK, tools=TOOLS, n=2)
        stream = await c.chat.completions.create(model="m", messages=ASK, tools=TOOLS, n=2, stream=True)
        named = {
            ch.index: tc.function.name
            async for chunk in stream
            for ch in chunk.choices
            for tc in ch.delta.tool_calls or ()
            if tc.function and tc.function.name
        }
    assert [c.finish_reason for c in whole.choices] == ["tool_calls", "tool_calls"]
    assert named == {0: "get_weather", 1: "get_weather"}


@pytest.mark.parametrize("parser", sorted(PARSERS))
async def test_the_simulator_writes_calls_in_each_format_and_the_gateway_reads_them(
    make_gateway, tokenizer_folder, parser
):
    gw = await make_gateway(config({"dialect": "tgi", "tool_parser": parser, "tokenizer": True}, str(tokenizer_folder)))
    async with sdk(gw) as c:
        whole = await c.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
        finish, text, calls = await streamed(c, messages=ASK, tools=TOOLS)
    (call,) = whole.choices[0].message.tool_calls or ()
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city":"Paris"}')
    assert [(name, args) for _, name, args in calls] == [("get_weather", '{"city":"Paris"}')]
    assert whole.choices[0].finish_reason == "tool_calls" == finish and not text.strip()


async def test_a_databricks_client_gets_calls_from_an_emulated_backend(make_gateway, tokenizer_folder):
    conf = config({"dialect": "tgi", **HERMES}, str(tokenizer_folder))
    conf["routes"] = [{"name": "r", "dialect": "databricks", "backend": "up"}]
    gw = await make_gateway(conf)
    tools = [{**t, "function": {**t["function"], "description": "d"}} for t in TOOLS]
    r = await gw.post("/serving-endpoints/m/invocations", json={"messages": ASK, "tools": tools})
    choice = (await r.json())["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
