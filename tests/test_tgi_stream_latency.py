"""TGI-wire streams: a token goes out at once when the backend will say "finished" with the last
token; otherwise each waits for the next event, so that the last token rides in the final event
and the client sees exactly one event per token.

The first upstream below sends one token and then waits until the test has seen that token at
the client; a renderer that held it back would deadlock here (bounded by wait_for)."""

import asyncio

from aiohttp import web

from tests.conftest import one_route
from tests.support import Recorded, sse_json, sse_reply

HEAD = b'data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":['
VLLM = {"extensions": "vllm"}


async def test_each_token_reaches_the_client_before_the_next_is_generated(upstream, make_gateway):
    first_seen = asyncio.Event()

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_type = "text/event-stream"
        await resp.prepare(request)
        await resp.write(HEAD + b'{"index":0,"text":" one","finish_reason":null}]}\n\n')
        await asyncio.wait_for(first_seen.wait(), 5)
        await resp.write(HEAD + b'{"index":0,"text":" two","finish_reason":"length"}]}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    upstream.reply = reply
    # A vLLM-style server finishes a choice in the chunk with its last token.
    gw = await make_gateway(one_route("tgi", "openai", upstream.url, options=VLLM))
    resp = await gw.post("/generate_stream", json={"inputs": "x", "parameters": {"max_new_tokens": 2}})
    first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
    assert (
        first == b'data:{"index":1,"token":{"id":0,"text":" one","logprob":null,"special":false},'
        b'"generated_text":null,"details":null}\n\n'
    )
    first_seen.set()
    rest = sse_json(await asyncio.wait_for(resp.read(), 5))
    assert rest == [
        {
            "index": 2,
            "token": {"id": 0, "text": " two", "logprob": None, "special": False},
            "generated_text": " one two",
            "details": None,
        }
    ]


async def test_a_finish_sent_on_its_own_still_gets_the_last_token(upstream, make_gateway):
    """The public API sends the finish in a chunk of its own: the last token waits for it, and the
    final event carries that token, not an invented empty one (text_generation rejects those)."""
    upstream.reply = sse_reply(
        [
            HEAD + b'{"index":0,"text":" one","finish_reason":null}]}\n\n',
            HEAD + b'{"index":0,"text":" two","finish_reason":null}]}\n\n',
            HEAD + b'{"index":0,"text":"","finish_reason":"length"}]}\n\n',
            b"data: [DONE]\n\n",
        ],
        delay=0.01,  # each chunk read on its own
    )
    gw = await make_gateway(one_route("tgi", "openai", upstream.url))
    resp = await gw.post("/generate_stream", json={"inputs": "x", "parameters": {"max_new_tokens": 2}})
    events = sse_json(await resp.read())
    assert [e["token"]["text"] for e in events] == [" one", " two"]
    assert [e["generated_text"] for e in events] == [None, " one two"]
