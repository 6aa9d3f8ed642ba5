"""The plain dialect as its clients speak it: one generate path, errors as `{"problem": ...}`."""

from collections.abc import Sequence

from gateway import jsonutil
from gateway.codec.contract import Endpoint, KeyHeader, Mount, PathValues, RenderContext, Reply
from gateway.codec.validation import load_object
from gateway.neutral import params
from gateway.neutral.errors import GatewayError, InvalidRequest
from gateway.neutral.types import Answer, Request, Result, Task


def parse(body: bytes, path: PathValues) -> Request:
    data = load_object(body)
    text, most = data.get("text"), data.get("max", 16)
    if not isinstance(text, str) or not isinstance(most, int) or most < 1:
        raise InvalidRequest("`text` must be a string and `max` a positive number")
    return Request(task=Task.COMPLETION, wire="plain", prompt=text, params=params.make({"max_tokens": most}))


def render(answer: Answer, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(answer, Result)
    choice = answer.choices[0]
    return jsonutil.dumps({"output": choice.text, "finish": choice.finish})


class PlainInbound:
    mounts: Sequence[Mount] = (Mount("POST", "/plain/generate", Endpoint(parse, render, None)),)
    # Its clients send their key in a header of its own.
    key_headers: Sequence[KeyHeader] = (KeyHeader("X-Plain-Key"),)

    def error_reply(self, err: GatewayError) -> Reply:
        return Reply(err.status, jsonutil.dumps({"problem": err.message}))
