"""What real servers send that the fakes of earlier tests did not: each case here is bytes a real
server (vLLM 0.32, LiteLLM's proxy, Triton 2.51, Databricks) sends, and what the gateway must
make of them. The real-server tier (tests/real) checks the same against the servers themselves
where they can be made to say it."""

from typing import Any

from aiohttp import web

from tests.conftest import one_route
from tests.support import Recorded, json_reply, raw_reply, sse_json, sse_reply

VLLM = {"extensions": "vllm"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
CHUNK = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'


def _completion(text: str, finish: str, stop_reason: Any) -> dict[str, Any]:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": stop_reason}
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [choice],
        "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
    }


async def test_stop_reason_tells_a_stop_string_from_the_end_of_sequence(upstream, make_gateway):
    """vLLM says `finish_reason: stop` for all three; `stop_reason` says which."""
    gw = await make_gateway(one_route("tgi", "openai", upstream.url, options=VLLM))
    body = {"inputs": "x", "parameters": {"details": True, "stop": ["!"]}}
    for stop_reason, word in (("!", "stop_sequence"), (2, "stop_sequence"), (None, "eos_token")):
        upstream.reply = json_reply(_completion(" hello!", "stop", stop_reason))
        details = (await (await gw.post("/generate", json=body)).json())["details"]
        assert details["finish_reason"] == word, stop_reason


async def test_tgi_keeps_the_stop_text_and_asks_for_real_token_ids(upstream, make_gateway):
    upstream.reply = json_reply(_completion(" hello!", "stop", "!") | {})
    gw = await make_gateway(one_route("tgi", "openai", upstream.url, options=VLLM))
    await gw.post("/generate", json={"inputs": "x", "parameters": {"stop": ["!"], "details": True}})
    sent = upstream.last.json
    assert sent["stop"] == ["!"] and sent["include_stop_str_in_output"] is True
    assert sent["return_token_ids"] is True
    # TGI decodes greedily unless told to sample.
    assert sent["temperature"] == 0.0


async def test_a_public_api_backend_cannot_keep_the_stop_text_so_the_gateway_cuts(upstream, make_gateway):
    upstream.reply = json_reply(_completion(" hello! and more", "length", None))
    gw = await make_gateway(one_route("tgi", "openai", upstream.url))
    resp = await gw.post("/generate", json={"inputs": "x", "parameters": {"stop": ["!"], "details": True}})
    answer = await resp.json()
    assert "stop" not in upstream.last.json  # the backend would cut the stop text away
    assert answer["generated_text"] == " hello!"
    assert answer["details"]["finish_reason"] == "stop_sequence"


async def test_tgi_details_tokens_are_the_backends_tokens(upstream, make_gateway):
    lp = {"tokens": [" he", "llo", "!"], "token_logprobs": [-0.5, -0.25, -1.0], "top_logprobs": None}
    choice = _completion(" hello!", "stop", "!")
    choice["choices"][0] |= {"token_ids": [11, 12, 13], "logprobs": lp}
    upstream.reply = json_reply(choice)
    gw = await make_gateway(one_route("tgi", "openai", upstream.url, options=VLLM))
    resp = await gw.post("/generate", json={"inputs": "x", "parameters": {"details": True}})
    details = (await resp.json())["details"]
    assert upstream.last.json["logprobs"] == 0  # each token's text and logprob
    assert details["generated_tokens"] == 3
    assert details["tokens"] == [
        {"id": 11, "text": " he", "logprob": -0.5, "special": False},
        {"id": 12, "text": "llo", "logprob": -0.25, "special": False},
        {"id": 13, "text": "!", "logprob": -1.0, "special": False},
    ]


async def test_tokens_vllm_sends_together_are_one_tgi_event_each(upstream, make_gateway):
    """vLLM holds back a token that ends inside a character and sends it with the next."""
    head = b'data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":['
    upstream.reply = sse_reply(
        [
            head + b'{"index":0,"text":" caf","token_ids":[5],"finish_reason":null}]}\n\n',
            head + b'{"index":0,"text":"\xc3\xa9","token_ids":[6,7],"finish_reason":"length","stop_reason":null}]}\n\n',
            b"data: [DONE]\n\n",
        ]
    )
    gw = await make_gateway(one_route("tgi", "openai", upstream.url, options=VLLM))
    resp = await gw.post("/generate_stream", json={"inputs": "x", "parameters": {"max_new_tokens": 3}})
    events = sse_json(await resp.read())
    assert [(e["token"]["id"], e["token"]["text"]) for e in events] == [(5, " caf"), (6, ""), (7, "é")]
    assert events[-1]["generated_text"] == " café"


async def test_litellm_usage_chunk_is_withheld_from_a_client_that_did_not_ask(upstream, make_gateway):
    """LiteLLM's usage chunk keeps an empty choice: `[{"index":0,"delta":{}}]`."""
    frames = [
        CHUNK + b'[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}\n\n',
        CHUNK + b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        CHUNK + b'[{"index":0,"delta":{}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}\n\n',
        b"data: [DONE]\n\n",
    ]
    upstream.reply = sse_reply(frames)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    got = sse_json(await (await gw.post("/v1/chat/completions", json={**CHAT, "stream": True})).read())
    assert not any("usage" in e for e in got if isinstance(e, dict))
    assert len(got) == 3 and got[-1] == "[DONE]"
    upstream.reply = sse_reply(frames)
    asked = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    got = sse_json(await (await gw.post("/v1/chat/completions", json=asked)).read())
    assert got[2]["usage"]["total_tokens"] == 4


async def test_continuous_usage_is_not_asked_for_a_client_that_wants_no_usage(upstream, make_gateway):
    upstream.reply = sse_reply([CHUNK + b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n', b"data: [DONE]\n\n"])
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    body = {**CHAT, "stream": True, "stream_options": {"continuous_usage_stats": True}}
    await gw.post("/v1/chat/completions", json=body)
    assert upstream.last.json["stream_options"] == {"include_usage": True}


async def test_system_fingerprint_stays_on_the_finishing_chunk(upstream, make_gateway):
    """Asked for usage, vLLM moves `system_fingerprint` to the usage chunk; a client that did not
    ask gets it where vLLM puts it without usage: at the end of the finishing chunk."""
    upstream.reply = sse_reply(
        [
            CHUNK + b'[{"index":0,"delta":{"content":"W"},"logprobs":null,"finish_reason":null}]}\n\n',
            CHUNK + b'[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":"length",'
            b'"stop_reason":null}]}\n\n',
            CHUNK + b'[],"usage":{"prompt_tokens":1,"total_tokens":3,"completion_tokens":2},'
            b'"system_fingerprint":"vllm-0.32.0-1"}\n\n',
            b"data: [DONE]\n\n",
        ]
    )
    gw = await make_gateway(one_route("openai", "openai", upstream.url, options=VLLM))
    body = await (await gw.post("/v1/chat/completions", json={**CHAT, "stream": True})).read()
    assert body.split(b"\n\n")[1] == (
        CHUNK + b'[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":"length",'
        b'"stop_reason":null}],"system_fingerprint":"vllm-0.32.0-1"}'
    )
    assert b"usage" not in body


async def test_vllm_reasoning_reaches_openai_and_databricks_clients(upstream, make_gateway):
    """vLLM 0.32 names it `reasoning`; OpenAI-style clients read `reasoning_content`, Databricks
    clients a `reasoning` content part before the text."""
    message = {"role": "assistant", "content": "4", "reasoning": "2 and 2 make 4"}
    answer = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    upstream.reply = json_reply(answer)
    gw = await make_gateway(one_route("databricks", "openai", upstream.url, model="m"))
    got = await (await gw.post("/serving-endpoints/m/invocations", json=CHAT)).json()
    assert got["choices"][0]["message"]["content"] == [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "2 and 2 make 4"}]},
        {"type": "text", "text": "4"},
    ]
    upstream.reply = sse_reply(
        [
            CHUNK + b'[{"index":0,"delta":{"reasoning":"2 and 2"},"finish_reason":null}]}\n\n',
            CHUNK + b'[{"index":0,"delta":{"content":"4"},"finish_reason":"stop"}]}\n\n',
            b"data: [DONE]\n\n",
        ]
    )
    resp = await gw.post("/serving-endpoints/m/invocations", json={**CHAT, "stream": True})
    deltas = [e["choices"][0]["delta"] for e in sse_json(await resp.read())[:-1] if e["choices"]]
    assert {"content": [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "2 and 2"}]}]} in [
        {k: v for k, v in d.items() if k != "role"} for d in deltas
    ]
    upstream.reply = json_reply(answer)
    gw = await make_gateway(one_route("openai", "databricks", upstream.url, model="m"))
    got = await (await gw.post("/v1/chat/completions", json=CHAT)).json()
    assert got["choices"][0]["message"]["reasoning_content"] == "2 and 2 make 4"


async def test_databricks_answers_name_the_served_model(upstream, make_gateway):
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        body = {"id": "c", "object": "chat.completion", "created": 1, "model": "llama", "choices": []}
        return web.json_response(body, headers={"served-model-name": "llama-3-70b"})

    upstream.reply = reply
    gw = await make_gateway(one_route("databricks", "databricks", upstream.url, model="ep"))
    resp = await gw.post("/serving-endpoints/ep/invocations", json=CHAT)
    assert resp.headers["served-model-name"] == "llama-3-70b"
    upstream.reply = json_reply({"choices": [{"index": 0, "message": {"role": "assistant", "content": "a"}}]})
    gw = await make_gateway(one_route("databricks", "openai", upstream.url, model="tiny"))
    resp = await gw.post("/serving-endpoints/ep/invocations", json=CHAT)
    assert resp.headers["served-model-name"] == "tiny"
    assert (await resp.json())["object"] == "chat.completion"
    upstream.reply = sse_reply([CHUNK + b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n', b"data: [DONE]\n\n"])
    resp = await gw.post("/serving-endpoints/ep/invocations", json={**CHAT, "stream": True})
    assert resp.status == 200 and resp.headers["served-model-name"] == "tiny"


async def test_a_triton_error_sent_as_an_event_is_read_out_of_it(upstream, make_gateway, tokenizer_folder):
    message = "Streaming with exclude_input_in_output=False is not allowed." + " " * 600 + "(the real cause)"
    upstream.reply = raw_reply(
        b'data: {"error":"' + message.encode() + b'"}\n\n', status=400, content_type="text/event-stream"
    )
    gw = await make_gateway(one_route("openai", "triton", upstream.url, model="vllm_model", options={"flavor": "vllm"}))
    resp = await gw.post("/v1/completions", json={"model": "x", "prompt": "p", "stream": True})
    err = (await resp.json())["error"]
    assert resp.status == 400 and err["message"].startswith("backend 'up' answered 400: Streaming with")
    assert "data:" not in err["message"]


async def test_a_model_the_backend_lacks_is_the_operators_mistake(upstream, make_gateway):
    upstream.reply = json_reply({"error": "Request for unknown model: 'ensembel' is not found"}, status=404)
    gw = await make_gateway(one_route("openai", "triton", upstream.url, model="ensembel"))
    resp = await gw.post("/v1/completions", json={"model": "mine", "prompt": "p"})
    err = (await resp.json())["error"]
    assert resp.status == 502 and "ensembel" in err["message"] and "configuration" in err["message"]
    # A model the client named itself is the client's to get wrong.
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    assert (await gw.post("/v1/completions", json={"model": "mine", "prompt": "p"})).status == 404


async def test_openai_model_list_is_the_backends(upstream, make_gateway):
    listed = {
        "object": "list",
        "data": [
            {"id": "tiny", "object": "model", "created": 5, "owned_by": "vllm", "root": "/m", "max_model_len": 512}
        ],
    }
    upstream.reply = json_reply(listed)
    config = one_route("openai", "openai", upstream.url, model="tiny")
    config["routes"][0]["models"] = ["gw-tiny"]
    gw = await make_gateway(config)
    got = await (await gw.get("/v1/models")).json()
    assert got["data"] == [{**listed["data"][0], "id": "gw-tiny"}]
    assert (await (await gw.get("/v1/models/gw-tiny")).json())["max_model_len"] == 512


async def test_tgi_details_tokens_read_by_the_tokenizer_where_the_backend_says_nothing(
    upstream, make_gateway, tokenizer_folder
):
    from gateway.adapters.tokenizer import Tokenizer

    upstream.reply = json_reply({"model_name": "ensemble", "model_version": "1", "text_output": " Hello world"})
    gw = await make_gateway(one_route("tgi", "triton", upstream.url, model="ensemble", tokenizer=tokenizer_folder))
    resp = await gw.post("/generate", json={"inputs": "x", "parameters": {"details": True, "max_new_tokens": 4}})
    tokens = (await resp.json())["details"]["tokens"]
    tok = Tokenizer.load(tokenizer_folder)
    assert [t["id"] for t in tokens] == tok.encode(" Hello world")
    assert "".join(t["text"] for t in tokens) == " Hello world"
    assert all(t["logprob"] is None and t["special"] is False for t in tokens)
