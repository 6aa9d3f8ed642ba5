"""Agent frameworks run a function tool to completion through an OpenAI route, whole and streamed:
langchain-openai's `bind_tools` loop and the OpenAI Agents SDK's chat-completions model, in front
of simulated backends whose wire carries only text (TGI, MindIE native, Triton's vLLM backend:
tools emulated with the `tool_parser:`) and of one that has tools (OpenAI). The Responses API
and Anthropic's SDK get their calls from an emulated backend too."""

from typing import Any

import anthropic
import openai
import pytest

from tests.tokenizer_kit import tokenizer_folder_fixture  # noqa: F401

agents = pytest.importorskip("agents")
langchain_openai = pytest.importorskip("langchain_openai")
messages = pytest.importorskip("langchain_core.messages")
lc_tools = pytest.importorskip("langchain_core.tools")

EMULATED = {"tool_parser": "hermes", "simulate": True}
BACKENDS: dict[str, dict[str, Any]] = {
    "tgi": {"dialect": "tgi", **EMULATED},
    "mindie-native": {"dialect": "mindie", **EMULATED},
    "triton-vllm": {"dialect": "triton", "options": {"flavor": "vllm"}, **EMULATED},
    "openai": {"dialect": "openai", "simulate": True},
}
QUESTION = "What is the weather in Oslo?"


@pytest.fixture(params=sorted(BACKENDS))
async def gw(request, make_gateway, tokenizer_folder):
    b = dict(BACKENDS[request.param])
    if "tool_parser" in b:
        b["tokenizer"] = str(tokenizer_folder)
    routes = [
        {"name": "chat", "dialect": "openai", "backend": "up"},
        {"name": "messages", "dialect": "anthropic", "prefix": "/anthropic", "backend": "up"},
    ]
    return await make_gateway({"backends": {"up": b}, "routes": routes})


def weather(city: str) -> str:
    return f"sunny in {city}"


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
async def test_langchain_bind_tools_loop(gw, streamed):
    calls: list[str] = []

    @lc_tools.tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return weather(city)

    llm = langchain_openai.ChatOpenAI(base_url=str(gw.make_url("/v1")), api_key="k", model="m", max_retries=0)
    bound = llm.bind_tools([get_weather])
    history: list[Any] = [messages.HumanMessage(QUESTION)]
    for _ in range(3):
        if streamed:
            reply = None
            async for chunk in bound.astream(history):
                reply = chunk if reply is None else reply + chunk
        else:
            reply = await bound.ainvoke(history)
        history.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            history.append(messages.ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
    assert calls == ["Oslo"]
    assert "sunny in Oslo" in history[-1].content


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_openai_agents_chat_completions_model(gw, streamed):
    agents.set_tracing_disabled(True)
    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return weather(city)

    client = openai.AsyncOpenAI(api_key="k", base_url=str(gw.make_url("/v1")), max_retries=0, timeout=10)
    model = agents.OpenAIChatCompletionsModel(model="m", openai_client=client)
    agent = agents.Agent(name="weather", instructions="Answer with the tool.", model=model, tools=[get_weather])
    if streamed:
        result = agents.Runner.run_streamed(agent, QUESTION)
        async for _ in result.stream_events():
            pass
    else:
        result = await agents.Runner.run(agent, QUESTION)
    assert calls == ["Oslo"]
    assert "sunny in Oslo" in result.final_output
    await client.close()


TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.mark.parametrize("stream", [False, True])
async def test_the_responses_api_gets_a_function_call(gw, stream):
    async with openai.AsyncOpenAI(api_key="k", base_url=str(gw.make_url("/v1")), max_retries=0) as c:
        if stream:
            async with c.responses.stream(model="m", input=QUESTION, tools=[TOOL]) as s:
                r = await s.get_final_response()
        else:
            r = await c.responses.create(model="m", input=QUESTION, tools=[TOOL])
        (call,) = [item for item in r.output if item.type == "function_call"]
        assert call.name == "get_weather" and call.arguments == '{"city":"Oslo"}'
        after = await c.responses.create(
            model="m",
            previous_response_id=r.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny in Oslo"}],
            tools=[TOOL],
        )
    assert "sunny in Oslo" in after.output_text


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_messages_get_a_tool_use(gw, stream):
    client = anthropic.AsyncAnthropic(base_url=str(gw.make_url("/anthropic")), api_key="k", max_retries=0)
    tools = [{"name": "get_weather", "description": "The weather", "input_schema": TOOL["parameters"]}]
    ask: dict[str, Any] = {"model": "m", "max_tokens": 64, "tools": tools}
    turn: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    if stream:
        async with client.messages.stream(**ask, messages=turn) as s:
            first = await s.get_final_message()
    else:
        first = await client.messages.create(**ask, messages=turn)
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.input == {"city": "Oslo"}
    turn += [
        {"role": "assistant", "content": [use.model_dump()]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny in Oslo"}]},
    ]
    after = await client.messages.create(**ask, messages=turn)
    assert after.stop_reason == "end_turn" and "sunny in Oslo" in after.content[0].text
    await client.close()
