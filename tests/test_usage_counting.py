"""Usage for backends that do not report prompt tokens: counted with the configured tokenizer,
left out (never guessed) without one."""

from gateway.adapters import Tokenizer
from tests.conftest import one_route
from tests.support import json_reply

INFER_ANSWER = {"generated_text": " fine", "details": {"finish_reason": "length", "generated_tokens": 2, "seed": 1}}


async def test_mindie_infer_prompt_counted_with_the_tokenizer(upstream, make_gateway, tokenizer_folder):
    upstream.reply = json_reply(INFER_ANSWER)
    gw = await make_gateway(one_route("openai", "mindie", upstream.url, model="m", tokenizer=tokenizer_folder))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "Hello world, how are you", "max_tokens": 2})
    assert resp.status == 200
    body = await resp.json()
    assert upstream.last.path == "/infer"
    prompt = Tokenizer.load(tokenizer_folder).count("Hello world, how are you")
    assert body["usage"] == {"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2}


async def test_mindie_infer_usage_left_out_without_a_tokenizer(upstream, make_gateway):
    upstream.reply = json_reply(INFER_ANSWER)
    gw = await make_gateway(one_route("openai", "mindie", upstream.url, model="m"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "Hello world", "max_tokens": 2})
    body = await resp.json()
    assert body["choices"][0]["text"] == " fine"
    assert "usage" not in body
