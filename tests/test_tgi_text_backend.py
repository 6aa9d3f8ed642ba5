"""OpenAI clients in front of a TGI server: chat through the backend's chat template, usage
from TGI's `x-prompt-tokens` header or the tokenizer, and stop text TGI keeps cut off."""

from aiohttp import web

from gateway import jsonutil
from gateway.adapters import ChatTemplate
from gateway.neutral.types import Message
from tests.conftest import one_route
from tests.support import Recorded, json_reply, sse_json, sse_reply


def tgi_answer(text: str, finish: str = "eos_token", tokens: int = 3) -> dict:
    return {"generated_text": text, "details": {"finish_reason": finish, "generated_tokens": tokens, "seed": None}}


async def test_chat_reaches_tgi_through_the_chat_template(upstream, make_gateway, tokenizer_folder):
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        body = jsonutil.dumps(tgi_answer(" Bonjour", tokens=2))
        return web.Response(body=body, content_type="application/json", headers={"x-prompt-tokens": "11"})

    upstream.reply = reply
    gw = await make_gateway(one_route("openai", "tgi", upstream.url, tokenizer=tokenizer_folder))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
    resp = await gw.post("/v1/chat/completions", json={"model": "m", "messages": messages, "max_tokens": 5})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": " Bonjour"}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}
    expected_prompt = ChatTemplate.load(tokenizer_folder).render(
        [Message("system", "Be brief."), Message("user", "Say hello")]
    )
    assert upstream.last.path == "/generate"
    assert upstream.last.json == {
        "inputs": expected_prompt,
        "parameters": {"max_new_tokens": 5, "details": True, "return_full_text": False},
    }
    assert expected_prompt.endswith("<|im_start|>assistant\n")


async def test_prompt_tokens_counted_with_the_tokenizer_without_the_header(upstream, make_gateway, tokenizer_folder):
    upstream.reply = json_reply(tgi_answer(" hi", tokens=1))
    gw = await make_gateway(one_route("openai", "tgi", upstream.url, tokenizer=tokenizer_folder))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "Hello world", "max_tokens": 1})
    body = await resp.json()
    from gateway.adapters import Tokenizer

    assert body["usage"]["prompt_tokens"] == Tokenizer.load(tokenizer_folder).count("Hello world")
    assert body["usage"]["completion_tokens"] == 1


async def test_kept_stop_text_is_cut_for_openai_clients(upstream, make_gateway):
    upstream.reply = json_reply(tgi_answer(" one two STOP", finish="stop_sequence"))
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "count", "stop": "STOP"})
    body = await resp.json()
    assert body["choices"][0]["text"] == " one two "
    assert body["choices"][0]["finish_reason"] == "stop"
    # TGI is still told to stop there, so it stops generating.
    assert upstream.last.json["parameters"]["stop"] == ["STOP"]


async def test_kept_stop_text_is_cut_in_streams(upstream, make_gateway):
    frames = [
        b'data:{"index":1,"token":{"id":1,"text":" one","logprob":-0.1,"special":false},'
        b'"generated_text":null,"details":null}\n\n',
        b'data:{"index":2,"token":{"id":2,"text":" ST","logprob":-0.1,"special":false},'
        b'"generated_text":null,"details":null}\n\n',
        b'data:{"index":3,"token":{"id":3,"text":"OP","logprob":-0.1,"special":false},'
        b'"generated_text":" one STOP","details":{"finish_reason":"stop_sequence","generated_tokens":3,'
        b'"seed":null}}\n\n',
    ]
    upstream.reply = sse_reply(frames)
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "count", "stop": ["STOP"], "stream": True})
    events = sse_json(await resp.read())
    assert events[-1] == "[DONE]"
    texts = "".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"])
    assert texts == " one "
    finishes = [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"]]
    assert finishes[-1] == "stop"


async def test_text_generation_client_reads_tokenizer_ids_from_an_openai_backend(
    upstream, make_gateway, tokenizer_folder
):
    """Ids filled in from the tokenizer stay single integers on the TGI wire: one event per piece
    the backend sent, whose id is the first its text reads as."""
    from text_generation import AsyncClient

    from gateway.adapters.tokenizer import Tokenizer
    from tests.support import sse_reply

    head = b'data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":['
    upstream.reply = sse_reply(
        [
            head + b'{"index":0,"text":" Hello world","finish_reason":null}]}\n\n',
            head + b'{"index":0,"text":" again","finish_reason":"length"}]}\n\n',
            b"data: [DONE]\n\n",
        ]
    )
    gw = await make_gateway(one_route("tgi", "openai", upstream.url, tokenizer=tokenizer_folder))
    client = AsyncClient(str(gw.make_url("")).rstrip("/"))
    tokens = [r.token async for r in client.generate_stream("Hi", max_new_tokens=2)]
    tok = Tokenizer.load(tokenizer_folder)
    ids = tok.encode(" Hello world") + tok.encode(" again")
    assert [t.text for t in tokens] == [" Hello world", " again"]
    assert [t.id for t in tokens] == [tok.encode(" Hello world")[0], tok.encode(" again")[0]]
    assert len(ids) > 2
