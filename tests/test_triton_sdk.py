"""The openai SDK, as users run it, against a gateway whose backend is a Triton simulator."""

from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI, BadRequestError

from gateway.simulator.server import create_sim_app
from tests.conftest import one_route
from tests.tokenizer_kit import build_tokenizer_folder


@pytest.fixture
async def sdk(aiohttp_server: Any, make_gateway: Any, tmp_path: Path) -> AsyncOpenAI:
    sim = await aiohttp_server(create_sim_app("triton"))
    folder = build_tokenizer_folder(tmp_path / "tok")
    config = one_route("openai", "triton", str(sim.make_url("")).rstrip("/"), model="ensemble", tokenizer=folder)
    gw = await make_gateway(config)
    return AsyncOpenAI(base_url=str(gw.make_url("/v1")), api_key="k", max_retries=0)


async def test_completions(sdk: AsyncOpenAI):
    out = await sdk.completions.create(model="m", prompt="hello there", max_tokens=50)
    assert out.choices[0].text == "Simulated answer 0: you said hello there. The gateway works end to end."
    assert out.choices[0].finish_reason == "stop"
    assert out.usage is not None and out.usage.prompt_tokens > 0


async def test_completions_stream_with_stop(sdk: AsyncOpenAI):
    stream = await sdk.completions.create(model="m", prompt="hello there", stop=[" you"], stream=True, max_tokens=50)
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Simulated answer 0:"
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_chat(sdk: AsyncOpenAI):
    out = await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
    assert out.choices[0].message.content is not None
    assert out.choices[0].message.content.startswith("Simulated answer 0: you said")


async def test_chat_stream(sdk: AsyncOpenAI):
    stream = await sdk.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Hi"}], stream=True, max_tokens=3
    )
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Simulated answer")


async def test_tools_are_refused(sdk: AsyncOpenAI):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with pytest.raises(BadRequestError, match="tools"):
        await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], tools=[tool])
