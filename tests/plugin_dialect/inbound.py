"""The plain dialect as its clients speak it: a generate path, whole or streamed (lines of text,
a `.` line while the backend is silent), which keeps each caller's last answer for
`GET /plain/last`; errors as `{"problem": ...}`."""

from collections.abc import Sequence

from gateway import jsonutil
from gateway.codec.capabilities import KeyHeader
from gateway.codec.contract import Caller, Endpoint, GroupView, Mount, PathValues, RenderContext, Reply
from gateway.codec.validation import load_object
from gateway.neutral import params
from gateway.neutral.errors import GatewayError, InvalidRequest, NotFound
from gateway.neutral.events import Event, TextDelta, expand
from gateway.neutral.types import Answer, Request, Result, Task


def parse(body: bytes, path: PathValues) -> Request:
    data = load_object(body)
    text, most = data.get("text"), data.get("max", 16)
    if not isinstance(text, str) or not isinstance(most, int) or most < 1:
        raise InvalidRequest("`text` must be a string and `max` a positive number")
    return Request(
        task=Task.COMPLETION,
        wire="plain",
        prompt=text,
        stream=bool(data.get("stream")),
        params=params.make({"max_tokens": most}),
    )


def render(answer: Answer, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(answer, Result)
    choice = answer.choices[0]
    return jsonutil.dumps({"output": choice.text, "finish": choice.finish})


async def keep(req: Request, answer: Answer, ctx: RenderContext, caller: Caller) -> None:
    assert isinstance(answer, Result)
    await caller.store.put(caller.owner, "last", answer.choices[0].text.encode())


class Lines:
    """Each piece of text on a line of its own; a `.` line for each silence."""

    content_type = "text/plain"
    ping_every_s = 0.01

    def __init__(self, req: Request, ctx: RenderContext) -> None:
        self._text: list[str] = []

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        texts = [ev.text for ev in expand(events) if type(ev) is TextDelta]
        self._text += texts
        return b"".join(t.encode() + b"\n" for t in texts)

    def ping(self) -> bytes:
        return b".\n"

    def error(self, err: GatewayError) -> bytes:
        return b"! " + err.message.encode() + b"\n"

    def end(self) -> bytes:
        return b"end\n"

    async def keep(self, caller: Caller) -> None:
        await caller.store.put(caller.owner, "last", "".join(self._text).encode())


async def last(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    kept = await caller.store.get(caller.owner, "last")
    if kept is None:
        raise NotFound("nothing kept for you")
    return Reply(body=jsonutil.dumps({"last": kept.decode()}))


class PlainInbound:
    mounts: Sequence[Mount] = (
        Mount("POST", "/plain/generate", Endpoint(parse, render, Lines, keep=keep)),
        Mount("GET", "/plain/last", info=last),
    )
    # Its clients send their key in a header of its own.
    key_headers: Sequence[KeyHeader] = (KeyHeader("X-Plain-Key"),)

    def error_reply(self, err: GatewayError) -> Reply:
        return Reply(err.status, jsonutil.dumps({"problem": err.message}))
