"""The Responses API through the gateway in front of the real servers, as the `openai` SDK uses it:
real vLLM's own /v1/responses passed through (its bytes as vLLM sends them), real vLLM reached
through chat completions (translated), and real Triton; every translated stream event read by the
SDK's own types."""

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway import jsonutil
from tests.real.servers import Server
from tests.support import responses_events, sdk_event

INPUT = "The quick brown fox"


def config(vllm: Server, triton: Server, tokenizer: Path) -> dict[str, Any]:
    tok = str(tokenizer)
    vllm_backend = {"dialect": "openai", "url": vllm.url, "model": "tiny", "tokenizer": tok, "timeout_s": 120}
    return {
        "backends": {
            "vllm": {**vllm_backend, "options": {"extensions": "vllm"}},
            "vllm-chat": {**vllm_backend, "options": {"extensions": "vllm", "responses_api": False}},
            "triton": {"dialect": "triton", "url": triton.url, "model": "ensemble", "tokenizer": tok,
                       "options": {"flavor": "trtllm", "count_tokens": True}},
        },
        "routes": [
            {"name": "passthrough", "dialect": "openai", "backend": "vllm", "models": ["tiny"]},
            {"name": "chat", "dialect": "openai", "backend": "vllm-chat", "models": ["tiny-chat"]},
            {"name": "triton", "dialect": "openai", "backend": "triton", "models": ["ens"]},
        ],
    }  # fmt: skip


@pytest.fixture
async def gw(make_gateway, vllm, triton, tiny_model):
    return await make_gateway(config(vllm, triton, tiny_model))


def kinds(events: list[dict[str, Any]]) -> list[str]:
    """The events' types, a run of deltas as one."""
    out: list[str] = []
    for e in events:
        if not (out and e["type"].endswith(".delta") and out[-1] == e["type"]):
            out.append(e["type"])
    return out


def sdk(gw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="k", base_url=str(gw.make_url("/v1")), max_retries=0, timeout=120)


async def test_vllms_own_responses_stream_comes_through_as_vllm_sent_it(gw, vllm):
    body = {"model": "tiny", "input": INPUT, "max_output_tokens": 8, "temperature": 0, "stream": True}
    ours = await (await gw.post("/v1/responses", json=body)).read()
    async with httpx.AsyncClient(timeout=120) as c:
        theirs = (await c.post(vllm.url + "/v1/responses", json=body)).content
    mine, direct = responses_events(ours), responses_events(theirs)
    # vLLM may put several tokens in one delta when it is busy: the deltas are compared joined.
    assert kinds(mine) == kinds(direct)
    text = "".join(e["delta"] for e in mine if e["type"] == "response.output_text.delta")
    assert text == "".join(e["delta"] for e in direct if e["type"] == "response.output_text.delta")
    # Kept as vLLM answered it.
    final = mine[-1]["response"]
    kept = await (await gw.get(f"/v1/responses/{final['id']}")).json()
    assert kept == final


@pytest.mark.parametrize("model", ["tiny-chat", "ens"])
async def test_a_translated_route_answers_the_sdk_and_keeps_the_conversation(gw, model):
    async with sdk(gw) as c:
        first = await c.responses.create(model=model, input=INPUT, max_output_tokens=8, temperature=0)
        assert first.status in ("completed", "incomplete") and first.output_text
        assert first.usage is not None and first.usage.output_tokens == 8
        resp = await gw.post("/v1/responses", json={"model": model, "input": INPUT, "max_output_tokens": 8,
                                                     "temperature": 0, "stream": True})  # fmt: skip
        events = responses_events(await resp.read())
        for ev in events:
            sdk_event(ev)
        streamed = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert streamed == first.output_text
        second = await c.responses.create(model=model, input="and then", previous_response_id=first.id,
                                          max_output_tokens=4, temperature=0)  # fmt: skip
        items = await c.responses.input_items.list(second.id, order="asc")
        assert [i.role for i in items.data] == ["user", "assistant", "user"]
        assert (await c.responses.retrieve(first.id)).output_text == first.output_text
        await c.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(first.id)
        count = await gw.post("/v1/responses/input_tokens", json={"model": model, "input": INPUT})
        assert (await count.json())["input_tokens"] > 0


async def test_the_translated_answer_is_what_vllm_answers_by_chat(gw, vllm):
    async with sdk(gw) as c:
        got = await c.responses.create(model="tiny-chat", input=INPUT, max_output_tokens=8, temperature=0)
    body = {"model": "tiny", "messages": [{"role": "user", "content": INPUT}], "max_tokens": 8, "temperature": 0}
    async with httpx.AsyncClient(timeout=120) as c:
        chat = jsonutil.loads((await c.post(vllm.url + "/v1/chat/completions", json=body)).content)
    assert got.output_text == chat["choices"][0]["message"]["content"]
    assert got.usage is not None and got.usage.input_tokens == chat["usage"]["prompt_tokens"]
