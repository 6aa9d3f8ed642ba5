"""TGI-wire streams never hold a token back waiting for the next one.

The upstream below sends one token and then waits until the test has seen that token arrive at
the client; a renderer that held tokens back would deadlock here (bounded by wait_for)."""

import asyncio

from aiohttp import web

from tests.conftest import one_route
from tests.support import Recorded, sse_json

HEAD = b'data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":['


async def test_each_token_reaches_the_client_before_the_next_is_generated(upstream, make_gateway):
    first_seen = asyncio.Event()

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_type = "text/event-stream"
        await resp.prepare(request)
        await resp.write(HEAD + b'{"index":0,"text":" one","finish_reason":null}]}\n\n')
        await asyncio.wait_for(first_seen.wait(), 5)
        await resp.write(HEAD + b'{"index":0,"text":"","finish_reason":"length"}]}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    upstream.reply = reply
    gw = await make_gateway(one_route("tgi", "openai", upstream.url))
    resp = await gw.post("/generate_stream", json={"inputs": "x", "parameters": {"max_new_tokens": 1}})
    first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
    assert (
        first == b'data:{"index":1,"token":{"id":0,"text":" one","logprob":null,"special":false},'
        b'"generated_text":null,"details":null}\n\n'
    )
    first_seen.set()
    rest = sse_json(await asyncio.wait_for(resp.read(), 5))
    # The finish came on its own, so the final event carries an empty token.
    assert rest == [
        {
            "index": 2,
            "token": {"id": 0, "text": "", "logprob": None, "special": False},
            "generated_text": " one",
            "details": None,
        }
    ]
