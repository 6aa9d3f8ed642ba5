"""The real servers start, and the gateway answers in front of each."""

import aiohttp

from tests.conftest import one_route


async def test_vllm_and_triton_answer_through_the_gateway(vllm, triton, make_gateway):
    gw = await make_gateway(one_route("openai", "openai", vllm.url, options={"extensions": "vllm"}))
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "temperature": 0}
    resp = await gw.post("/v1/chat/completions", json=body)
    assert resp.status == 200, await resp.text()
    async with aiohttp.ClientSession() as s, s.post(vllm.url + "/v1/chat/completions", json=body) as direct:
        assert (await resp.json())["choices"][0]["message"] == (await direct.json())["choices"][0]["message"]
    gw = await make_gateway(one_route("triton", "triton", triton.url))
    resp = await gw.post("/v2/models/minimal/generate", json={"text_input": "hello there", "max_tokens": 3})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["text_output"] == "Triton answers hello"
