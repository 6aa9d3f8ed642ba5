"""The anthropic SDK, as users run it, through the gateway in front of a simulated server of
every backend dialect: messages.create, messages.stream (whose accumulator must rebuild the
message the whole answer gives) and messages.count_tokens."""

from pathlib import Path
from typing import Any

import anthropic
import pytest

from gateway.simulator.server import create_sim_app
from tests.conftest import one_route
from tests.tokenizer_kit import build_tokenizer_folder

# Backend dialect -> what its backend needs besides a URL.
BACKENDS: dict[str, dict[str, Any]] = {
    "openai": {},
    "tgi": {},
    "mindie": {},
    "triton": {"model": "ensemble"},
    "databricks": {"model": "my-ep"},
    "anthropic": {},
}
TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


async def _client(aiohttp_server: Any, make_gateway: Any, tmp_path: Path, dialect: str) -> anthropic.AsyncAnthropic:
    sim = await aiohttp_server(create_sim_app(dialect))
    folder = build_tokenizer_folder(tmp_path / "tok")
    config = one_route("anthropic", dialect, str(sim.make_url("")).rstrip("/"), tokenizer=folder, **BACKENDS[dialect])
    config["auth"] = {"api_keys": ["sk-gw"]}
    gw = await make_gateway(config)
    return anthropic.AsyncAnthropic(base_url=str(gw.make_url("")).rstrip("/"), api_key="sk-gw", max_retries=0)


@pytest.fixture(params=list(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def client(backend: str, aiohttp_server: Any, make_gateway: Any, tmp_path: Path) -> anthropic.AsyncAnthropic:
    return await _client(aiohttp_server, make_gateway, tmp_path, backend)


ASK: dict[str, Any] = {
    "model": "sim-model",
    "max_tokens": 64,
    "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
}


def _same(whole: anthropic.types.Message, streamed: anthropic.types.Message, backend: str = "") -> None:
    left, right = streamed.model_dump(exclude={"id"}), whole.model_dump(exclude={"id"})
    if backend == "tgi":
        # The TGI simulator counts the prompt's words in its stream's details, where the gateway
        # counts a whole answer's prompt with the tokenizer (a real TGI says one count both ways).
        del left["usage"]["input_tokens"], right["usage"]["input_tokens"]
    if backend == "databricks":
        # The gateway's Databricks client does not ask a stream for usage, so it has none.
        del left["usage"], right["usage"]
    assert left == right
    assert whole.id.startswith("msg_") and streamed.id.startswith("msg_")


async def test_create_and_stream_give_the_same_message(client: anthropic.AsyncAnthropic, backend: str):
    whole = await client.messages.create(**ASK)
    assert isinstance(whole, anthropic.types.Message)
    assert whole.role == "assistant" and whole.type == "message"
    assert [b.type for b in whole.content] == ["text"]
    assert "hello there" in whole.content[0].text  # type: ignore[union-attr]
    assert whole.stop_reason == "end_turn" and whole.stop_sequence is None
    assert whole.usage.input_tokens > 0 and whole.usage.output_tokens > 0
    async with client.messages.stream(**ASK) as stream:
        streamed = await stream.get_final_message()
    _same(whole, streamed, backend)


async def test_a_cut_answer_stops_for_max_tokens(client: anthropic.AsyncAnthropic, backend: str):
    whole = await client.messages.create(**{**ASK, "max_tokens": 3})
    assert whole.stop_reason == "max_tokens"
    async with client.messages.stream(**{**ASK, "max_tokens": 3}) as stream:
        streamed = await stream.get_final_message()
    _same(whole, streamed, backend)


@pytest.mark.parametrize("backend", ["tgi", "triton", "anthropic"])
async def test_a_stop_sequence_stops_and_is_named(client: anthropic.AsyncAnthropic, backend: str):
    """On the backends that say a stop string stopped them (or where the gateway cuts at it);
    an OpenAI-style server's plain `stop` cannot be told from the end of the turn."""
    ask = {**ASK, "stop_sequences": ["gateway"]}
    whole = await client.messages.create(**ask)
    assert whole.stop_reason == "stop_sequence" and whole.stop_sequence == "gateway"
    assert whole.content[0].text.endswith("The ")  # type: ignore[union-attr]
    async with client.messages.stream(**ask) as stream:
        streamed = await stream.get_final_message()
    _same(whole, streamed, backend)


async def test_count_tokens_counts_the_prompt_the_backend_is_given(client: anthropic.AsyncAnthropic):
    counted = await client.messages.count_tokens(model="sim-model", system=ASK["system"], messages=ASK["messages"])
    assert counted.input_tokens > 5
    longer = await client.messages.count_tokens(
        model="sim-model", system=ASK["system"], messages=[{"role": "user", "content": "hello there and more words"}]
    )
    assert longer.input_tokens > counted.input_tokens


@pytest.mark.parametrize("dialect", ["tgi", "triton"])
async def test_a_text_backend_counts_as_it_reports_usage(aiohttp_server, make_gateway, tmp_path, dialect):
    client = await _client(aiohttp_server, make_gateway, tmp_path, dialect)
    counted = await client.messages.count_tokens(model="sim-model", system=ASK["system"], messages=ASK["messages"])
    whole = await client.messages.create(**ASK)
    assert whole.usage.input_tokens == counted.input_tokens


async def test_count_tokens_without_a_tokenizer_names_the_setting(aiohttp_server, make_gateway):
    sim = await aiohttp_server(create_sim_app("openai"))
    gw = await make_gateway(one_route("anthropic", "openai", str(sim.make_url("")).rstrip("/")))
    client = anthropic.AsyncAnthropic(base_url=str(gw.make_url("")).rstrip("/"), api_key="k", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as e:
        await client.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "`tokenizer:`" in e.value.message


@pytest.mark.parametrize("dialect", ["openai", "databricks", "anthropic"])
async def test_a_tool_call_is_a_tool_use_block_and_its_result_continues_the_turn(
    aiohttp_server, make_gateway, tmp_path, dialect
):
    client = await _client(aiohttp_server, make_gateway, tmp_path, dialect)
    ask = {**ASK, "tools": TOOLS, "messages": [{"role": "user", "content": "weather in Paris"}]}
    whole = await client.messages.create(**ask)
    assert whole.stop_reason == "tool_use"
    (use,) = whole.content
    assert isinstance(use, anthropic.types.ToolUseBlock)
    assert use.id.startswith("toolu_") and use.name == "get_weather" and isinstance(use.input, dict)
    async with client.messages.stream(**ask) as stream:
        streamed = await stream.get_final_message()
    _same(whole, streamed, dialect)
    turn = [
        *ask["messages"],
        {"role": "assistant", "content": [use.model_dump()]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 C"}]},
    ]
    after = await client.messages.create(**{**ask, "messages": turn})
    assert after.stop_reason == "end_turn" and after.content[0].type == "text"


@pytest.mark.parametrize("dialect", ["tgi", "triton"])
async def test_a_text_backend_without_a_tool_parser_refuses_tools(aiohttp_server, make_gateway, tmp_path, dialect):
    client = await _client(aiohttp_server, make_gateway, tmp_path, dialect)
    with pytest.raises(anthropic.BadRequestError) as e:
        await client.messages.create(**{**ASK, "tools": TOOLS})
    assert e.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "tools" in e.value.message


async def test_the_key_may_come_as_x_api_key_or_bearer(aiohttp_server, make_gateway, tmp_path):
    client = await _client(aiohttp_server, make_gateway, tmp_path, "openai")
    bearer = anthropic.AsyncAnthropic(base_url=str(client.base_url), auth_token="sk-gw", max_retries=0)
    assert (await bearer.messages.create(**ASK)).stop_reason == "end_turn"
    wrong = anthropic.AsyncAnthropic(base_url=str(client.base_url), api_key="sk-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        await wrong.messages.create(**ASK)
    assert e.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


async def test_models_are_listed_as_the_api_lists_them(client: anthropic.AsyncAnthropic):
    page = await client.models.list()
    assert [m.id for m in page.data] == ["sim-model"] or page.data  # the route's model, or its name
    for m in page.data:
        assert isinstance(m, anthropic.types.ModelInfo) and m.type == "model"
        assert (await client.models.retrieve(m.id)).id == m.id


@pytest.mark.parametrize("backend", ["tgi", "triton", "anthropic"])
async def test_of_several_stop_sequences_the_one_that_matched_is_named(client: anthropic.AsyncAnthropic, backend: str):
    ask = {**ASK, "stop_sequences": ["zzz", "gateway", "works"]}
    whole = await client.messages.create(**ask)
    assert whole.stop_reason == "stop_sequence" and whole.stop_sequence == "gateway"
    async with client.messages.stream(**ask) as stream:
        streamed = await stream.get_final_message()
    _same(whole, streamed, backend)
