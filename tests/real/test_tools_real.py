"""Tool calls through an OpenAI route in front of real servers, as agents make them: the `openai`
SDK, langchain-openai's `bind_tools` loop and the OpenAI Agents SDK's chat-completions model, whole
and streamed; a function tool is called, and its result goes back in a second turn.

- vLLM started with its own tool parser (`--enable-auto-tool-choice --tool-call-parser hermes`):
  tools native, passed through. The tiny random-weight model writes a call only when forced, so
  the tool choice names the function: vLLM holds the answer to the tool's schema (the tool marked
  `strict`; xgrammar, with free whitespace off where it can be). A random model still puts blanks
  between JSON tokens, greedily without end; sampled, with a seed, it ends the call in some sixty
  tokens, so the forcing turn is seeded and given room.
- Triton through PyTriton, whose `hermes` model (tests/real/triton_models.py) writes Hermes' tool
  calls as text: tools emulated by the gateway (`tool_parser: hermes`), the prompt made by the
  model's chat template.

Also: a response format reaches vLLM as its own field from a TGI client's JSON grammar, and the
answer holds to the schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import openai
import pytest

from tests.real import servers
from tests.real.servers import Server
from tests.real.test_clients_real import TIMEOUT, Gateway, serve

agents = pytest.importorskip("agents")
langchain_openai = pytest.importorskip("langchain_openai")
lc_messages = pytest.importorskip("langchain_core.messages")
lc_tools = pytest.importorskip("langchain_core.tools")

VLLM_TOOLS = (
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--chat-template-content-format",
    "string",
    "--structured-outputs-config",
    json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
)
CITY = {"type": "string", "enum": ["Paris", "Oslo"]}
PARAMS = {"type": "object", "properties": {"city": CITY}, "required": ["city"], "additionalProperties": False}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": PARAMS}}
STRICT = {"type": "function", "function": {**TOOL["function"], "strict": True}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
# What the turn that calls is given (see the module's docstring).
ROOM = {"max_tokens": 300, "seed": 1}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def vllm_tools(tiny_model: Path) -> Iterator[Server]:
    """A vLLM of its own (its tool parser on), or the one GATEWAY_REAL_VLLM_TOOLS names."""
    server = servers.running("GATEWAY_REAL_VLLM_TOOLS") or servers.start_vllm(
        tiny_model, max_model_len=1024, more=VLLM_TOOLS
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def triton_hermes(triton: Server) -> Iterator[Server]:
    """The session's Triton when it serves the `hermes` model, else one of this tree's own."""
    if httpx.get(f"{triton.url}/v2/models/hermes/ready", timeout=5).status_code == 200:
        yield triton
        return
    own = servers.start_triton()
    yield own
    own.stop()


@pytest.fixture(scope="module")
def gateway(
    vllm_tools: Server, triton_hermes: Server, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tok = str(tiny_model)
    config = {
        "backends": {
            "vllm": {"dialect": "openai", "url": vllm_tools.url, "model": "tiny", "timeout_s": TIMEOUT,
                     "options": {"extensions": "vllm"}},
            "triton": {"dialect": "triton", "url": triton_hermes.url, "model": "hermes", "tokenizer": tok,
                       "tool_parser": "hermes", "options": {"flavor": "vllm"}},
        },
        "routes": [
            {"name": "vllm", "dialect": "openai", "prefix": "/vllm", "backend": "vllm"},
            {"name": "triton", "dialect": "openai", "prefix": "/triton", "backend": "triton"},
            {"name": "tgi-vllm", "dialect": "tgi", "prefix": "/tgi", "backend": "vllm"},
        ],
    }  # fmt: skip
    with serve(config, tmp_path_factory.mktemp("gateway-tools")) as gw:
        yield gw


# The route, the tool as the client sends it, and the tool choice of the turn that calls.
BACKENDS = {"vllm": (STRICT, NAMED), "triton": (TOOL, "auto")}


def client(gw: Gateway, route: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/{route}/v1", api_key="x", max_retries=0, timeout=TIMEOUT)


def streamed(c: openai.OpenAI, **ask: Any) -> tuple[str | None, str, list[dict[str, str]]]:
    finish, text, calls = None, "", {}
    for chunk in c.chat.completions.create(model="tiny", stream=True, **ask):
        for ch in chunk.choices:
            text += ch.delta.content or ""
            for tc in ch.delta.tool_calls or ():
                call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = tc.id or call["id"]
                call["name"] += (tc.function.name if tc.function else None) or ""
                call["arguments"] += (tc.function.arguments if tc.function else None) or ""
            finish = ch.finish_reason or finish
    return finish, text, [calls[k] for k in sorted(calls)]


@pytest.mark.parametrize("route", sorted(BACKENDS))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_openai_sdk_calls_the_tool_and_answers_with_its_result(gateway, route, stream):
    tool, choice = BACKENDS[route]
    c = client(gateway, route)
    ask = {"messages": ASK, "tools": [tool], "tool_choice": choice, **ROOM}
    if stream:
        finish, _, calls = streamed(c, **ask)
        (call,) = calls
        call_id, name, arguments = call["id"], call["name"], call["arguments"]
    else:
        whole = c.chat.completions.create(model="tiny", **ask)
        finish = whole.choices[0].finish_reason
        (made,) = whole.choices[0].message.tool_calls or ()
        call_id, name, arguments = made.id, made.function.name, made.function.arguments
    # A named choice finishes "stop" on vLLM, as on OpenAI; calls the model chose, "tool_calls".
    assert finish == ("stop" if choice == NAMED else "tool_calls")
    assert name == "get_weather" and json.loads(arguments)["city"] in ("Paris", "Oslo")
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    turn = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": "sunny"}]  # fmt: skip
    after = c.chat.completions.create(model="tiny", messages=turn, tools=[tool], max_tokens=16)
    assert not after.choices[0].message.tool_calls and after.choices[0].message.content
    if route == "triton":
        assert after.choices[0].message.content == "The tool said: sunny."


@pytest.mark.parametrize("route", sorted(BACKENDS))
@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_langchain_bind_tools_loop(gateway, route, stream):
    calls: list[str] = []

    @lc_tools.tool
    def get_weather(city: Literal["Paris", "Oslo"]) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"sunny in {city}"

    forced = route == "vllm"
    llm = langchain_openai.ChatOpenAI(
        base_url=f"{gateway.url}/{route}/v1", api_key="x", model="tiny", max_retries=0, **ROOM
    )
    first = llm.bind_tools([get_weather], tool_choice="get_weather" if forced else None, strict=forced or None)
    then = llm.bind_tools([get_weather], strict=forced or None)
    history: list[Any] = [lc_messages.HumanMessage("What is the weather in Paris?")]
    for model in (first, then):
        if stream:
            reply = None
            for chunk in model.stream(history):
                reply = chunk if reply is None else reply + chunk
        else:
            reply = model.invoke(history)
        history.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            history.append(lc_messages.ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
    assert len(calls) == 1 and calls[0] in ("Paris", "Oslo")
    assert isinstance(history[-1], lc_messages.AIMessage) and history[-1].content
    if route == "triton":
        assert history[-1].content == f"The tool said: sunny in {calls[0]}."


@pytest.mark.parametrize("route", sorted(BACKENDS))
@pytest.mark.parametrize("streamed_run", [False, True], ids=["run", "run_streamed"])
async def test_openai_agents_chat_completions_model(gateway, route, streamed_run):
    agents.set_tracing_disabled(True)
    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: Literal["Paris", "Oslo"]) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"sunny in {city}"

    c = openai.AsyncOpenAI(base_url=f"{gateway.url}/{route}/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
    model = agents.OpenAIChatCompletionsModel(model="tiny", openai_client=c)
    # Forced on vLLM for the first turn only: the SDK puts the choice back to auto after a call.
    settings = agents.ModelSettings(
        max_tokens=ROOM["max_tokens"],
        extra_args={"seed": ROOM["seed"]},
        tool_choice="get_weather" if route == "vllm" else None,
    )
    agent = agents.Agent(name="weather", instructions="Use the tool.", model=model, tools=[get_weather],
                         model_settings=settings)  # fmt: skip
    if streamed_run:
        result = agents.Runner.run_streamed(agent, "What is the weather in Paris?", max_turns=3)
        async for _ in result.stream_events():
            pass
    else:
        result = await agents.Runner.run(agent, "What is the weather in Paris?", max_turns=3)
    assert len(calls) == 1 and calls[0] in ("Paris", "Oslo")
    assert isinstance(result.final_output, str) and result.final_output
    if route == "triton":
        assert result.final_output == f"The tool said: sunny in {calls[0]}."
    await c.close()


def test_a_tgi_grammar_reaches_vllm_as_its_response_format(gateway):
    grammar = {"type": "json", "value": {"type": "object", "properties": {"city": CITY}, "required": ["city"]}}
    body = {"inputs": "The weather in", "parameters": {"max_new_tokens": 32, "grammar": grammar}}
    r = httpx.post(f"{gateway.url}/tgi/generate", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert json.loads(r.json()["generated_text"])["city"] in ("Paris", "Oslo")
