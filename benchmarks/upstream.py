"""A minimal fast OpenAI-style upstream for benchmarks: fixed answers, no validation.

Kept deliberately cheaper than the gateway so the benchmark measures the gateway, not this.
"""

import sys

from aiohttp import web

from gateway import jsonutil

CHUNKS = int(sys.argv[2]) if len(sys.argv) > 2 else 100

_JSON = jsonutil.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello from the benchmark upstream."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
    }
)
_HEAD = b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench","choices":['
_STREAM = (
    _HEAD
    + b'{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
    + (_HEAD + b'{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}\n\n') * CHUNKS
    + _HEAD
    + b'{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    + b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench","choices":[],'
    b'"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}\n\n'
    % (CHUNKS, CHUNKS + 5)
    + b"data: [DONE]\n\n"
)


_CJSON = jsonutil.dumps(
    {
        "id": "cmpl-bench",
        "object": "text_completion",
        "created": 1,
        "model": "bench",
        "choices": [{"index": 0, "text": " Hello from the benchmark upstream.", "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
    }
)
_CHEAD = b'data: {"id":"cmpl-bench","object":"text_completion","created":1,"model":"bench","choices":['
_CSTREAM = (
    (_CHEAD + b'{"index":0,"text":" tok","finish_reason":null}]}\n\n') * CHUNKS
    + _CHEAD
    + b'{"index":0,"text":"","finish_reason":"length"}]}\n\n'
    + b'data: {"id":"cmpl-bench","object":"text_completion","created":1,"model":"bench","choices":[],'
    b'"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}\n\n'
    % (CHUNKS, CHUNKS + 5)
    + b"data: [DONE]\n\n"
)


def _answer(body: bytes, whole: bytes, stream: bytes) -> web.Response:
    if b'"stream":true' in body.replace(b" ", b""):
        return web.Response(body=stream, content_type="text/event-stream")
    return web.Response(body=whole, content_type="application/json")


async def chat(request: web.Request) -> web.StreamResponse:
    return _answer(await request.read(), _JSON, _STREAM)


async def completions(request: web.Request) -> web.StreamResponse:
    return _answer(await request.read(), _CJSON, _CSTREAM)


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "bench", "object": "model"}]})


app = web.Application()
app.router.add_post("/v1/chat/completions", chat)
app.router.add_post("/v1/completions", completions)
app.router.add_get("/v1/models", models)

if __name__ == "__main__":
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
