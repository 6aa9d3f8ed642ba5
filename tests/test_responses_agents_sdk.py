"""The OpenAI Agents SDK (`openai-agents`) runs an agent with a function tool to completion
through the gateway's Responses API, its model a backend that answers chat completions with a
tool call and then with text."""

from typing import Any

import openai
import pytest
from aiohttp import web

from gateway import jsonutil
from tests.conftest import one_route
from tests.support import Recorded

agents = pytest.importorskip("agents")


def chat_answer(message: dict[str, Any], finish: str) -> bytes:
    return jsonutil.dumps({
        "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
    })  # fmt: skip


def chat_stream(message: dict[str, Any], finish: str) -> bytes:
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    delta = {"role": "assistant", **message}
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": k, **c} for k, c in enumerate(delta["tool_calls"])]
    frames = [{**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
              {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]  # fmt: skip
    return b"".join(b"data: " + jsonutil.dumps(f) + b"\n\n" for f in frames) + b"data: [DONE]\n\n"


def tool_then_text(upstream: Any) -> None:
    """The model calls get_weather once, then answers with what the tool said."""

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        body = rec.json
        said = [m for m in body["messages"] if m["role"] == "tool"]
        if said:
            message, finish = {"content": f"The tool says: {said[-1]['content']}"}, "stop"
        else:
            call = {
                "id": "call_w",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
            }
            message, finish = {"content": None, "tool_calls": [call]}, "tool_calls"
        if body.get("stream"):
            return web.Response(body=chat_stream(message, finish), content_type="text/event-stream")
        return web.Response(body=chat_answer(message, finish), content_type="application/json")

    upstream.reply = reply


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_an_agent_runs_its_function_tool_to_completion(upstream, make_gateway, streamed):
    tool_then_text(upstream)
    gw = await make_gateway(one_route("openai", "openai", upstream.url, options={"responses_api": False}))
    agents.set_tracing_disabled(True)
    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"sunny in {city}"

    client = openai.AsyncOpenAI(api_key="k", base_url=str(gw.make_url("/v1")), max_retries=0, timeout=10)
    model = agents.OpenAIResponsesModel(model="m", openai_client=client)
    agent = agents.Agent(name="weather", instructions="Answer with the tool.", model=model, tools=[get_weather])
    if streamed:
        result = agents.Runner.run_streamed(agent, "What is the weather in Oslo?")
        async for _ in result.stream_events():
            pass
    else:
        result = await agents.Runner.run(agent, "What is the weather in Oslo?")
    assert calls == ["Oslo"]
    assert result.final_output == "The tool says: sunny in Oslo"
    first, second = (r.json for r in upstream.requests)
    assert first["tools"][0]["function"]["name"] == "get_weather"
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    await client.close()
