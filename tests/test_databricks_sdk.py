"""Databricks simulator and the OpenAI SDK through the /serving-endpoints form (real clients)."""

from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.simulator.server import create_sim_app
from tests.conftest import one_route
from tests.support import sse_json, sse_reply

FIX = Path(__file__).parent / "fixtures" / "databricks"
INV = "/serving-endpoints/my-ep/invocations"


def stream_frames(name: str) -> list[bytes]:
    return [f + b"\n\n" for f in (FIX / name).read_bytes().split(b"\n\n") if f]


# ---- simulator: fan-out of batches ---------------------------------------------------------


async def test_simulator_fans_out_batch_with_n(aiohttp_client):
    sim = await aiohttp_client(create_sim_app("databricks"))
    resp = await sim.post(INV, json={"prompt": ["eins zwei", "drei"], "n": 2, "max_tokens": 5})
    assert resp.status == 200
    out = await resp.json()
    assert [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    assert [c["text"] for c in out["choices"]] == [
        "Simulated answer 0: you said",
        "Simulated answer 1: you said",
        "Simulated answer 0: you said",
        "Simulated answer 1: you said",
    ]
    assert out["usage"] == {"prompt_tokens": 3, "completion_tokens": 20, "total_tokens": 23}
    # A streamed batch is merged from one stream per prompt, each choice under its prompt's index.
    resp = await sim.post(INV, json={"prompt": ["a", "b"], "stream": True, "max_tokens": 2})
    assert resp.status == 200
    chunks = [c for c in sse_json(await resp.read()) if c != "[DONE]"]
    texts = {0: "", 1: ""}
    for c in chunks:
        for ch in c["choices"]:
            texts[ch["index"]] += ch["text"]
    assert texts == {0: "Simulated answer", 1: "Simulated answer"}


async def test_simulator_answers_prompt_text_per_position(aiohttp_client):
    sim = await aiohttp_client(create_sim_app("databricks"))
    out = await (await sim.post(INV, json={"prompt": ["alpha", "beta"]})).json()
    assert "alpha" in out["choices"][0]["text"] and "beta" in out["choices"][1]["text"]


# ---- the OpenAI SDK through the /serving-endpoints form ------------------------------------


async def _sdk(aiohttp_client: Any) -> openai.AsyncOpenAI:
    sim = await aiohttp_client(create_sim_app("databricks"))
    return openai.AsyncOpenAI(base_url=str(sim.make_url("/serving-endpoints")), api_key="dapi-x", max_retries=0)


async def test_openai_sdk_chat_completions_embeddings(aiohttp_client):
    client = await _sdk(aiohttp_client)
    chat = await client.chat.completions.create(
        model="my-ep", messages=[{"role": "user", "content": "hallo welt"}], max_tokens=4
    )
    assert chat.choices[0].message.content == "Simulated answer 0: you"
    assert chat.model == "my-ep" and chat.id.startswith("chatcmpl_")
    comp = await client.completions.create(model="my-ep", prompt=["a", "b"], max_tokens=2)
    assert [c.index for c in comp.choices] == [0, 1]
    emb = await client.embeddings.create(model="my-ep", input=["x", "y"])
    assert len(emb.data) == 2 and len(emb.data[0].embedding) == 16
    with pytest.raises(openai.BadRequestError) as e:
        await client.chat.completions.create(model="my-ep", messages=[{"role": "user", "content": "a"}], top_p=3)
    assert e.value.body["error_code"] == "INVALID_PARAMETER_VALUE"  # type: ignore[index]


async def test_openai_sdk_stream(aiohttp_client):
    client = await _sdk(aiohttp_client)
    stream = await client.chat.completions.create(
        model="my-ep",
        messages=[{"role": "user", "content": "hallo"}],
        max_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    assert text == "Simulated answer 0:"
    assert usage is not None and usage.completion_tokens == 3


async def test_openai_sdk_raises_on_inband_stream_error(upstream, make_gateway):
    upstream.reply = sse_reply(stream_frames("chat_stream.txt")[:1])
    gw = await make_gateway(one_route("databricks", "databricks", upstream.url, model="b"))
    client = openai.AsyncOpenAI(base_url=str(gw.make_url("/serving-endpoints")), api_key="k", max_retries=0)
    stream = await client.chat.completions.create(
        model="my-ep", messages=[{"role": "user", "content": "a"}], stream=True
    )
    with pytest.raises(openai.APIError, match="ended before it was complete"):
        async for _ in stream:
            pass
