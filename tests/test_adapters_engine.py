"""Stop-string emulation wired into the proxy engine, against a real (fake) upstream server.

A backend codec that cannot send stop strings says so with Fate.EMULATE; the engine then cuts
whole answers itself and wraps streams so that a matched stop ends the stream and cuts the
upstream connection.
"""

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import pytest

from gateway import config as cfg
from gateway import jsonutil
from gateway.adapters.stops import StopStream
from gateway.core.engine import ProxyEngine
from gateway.core.exchange import Exchange
from gateway.core.params import Fate
from gateway.core.routing import Backend
from gateway.core.types import Event, Finish, FinishEvent, Message, Request, Result, Task, TextDelta
from gateway.dialects import get as get_dialect
from gateway.dialects.base import UpstreamCall
from tests.support import FakeUpstream, json_reply, sse_reply


class NoStopOutbound:
    """The OpenAI codec, posing as a backend without stop strings (as MindIE native or Triton)."""

    def __init__(self) -> None:
        self._inner: Any = get_dialect("openai").outbound
        self.name = "openai"
        self.options_model = self._inner.options_model

    def fates(self, backend: Backend, req: Request) -> Mapping[str, Fate]:
        return {**self._inner.fates(backend, req), "stop": Fate.EMULATE, "include_stop_str_in_output": Fate.EMULATE}

    def build(self, req: Request, backend: Backend) -> UpstreamCall:
        # A codec with an emulated stop does not map it.
        kept = {k: v for k, v in req.params.items() if k not in ("stop", "include_stop_str_in_output")}
        return self._inner.build(dataclasses.replace(req, params=kept), backend)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    s = aiohttp.ClientSession()
    yield s
    await s.close()


def engine(upstream: FakeUpstream, session: aiohttp.ClientSession, outbound: Any = None) -> ProxyEngine:
    d = get_dialect("openai")
    if outbound is not None:
        d = dataclasses.replace(d, outbound=outbound)
    conf = cfg.Backend(dialect="openai", url=upstream.url)
    backend = Backend("up", conf, d, d.outbound.options_model(), [upstream.url], {}, session=session)
    return ProxyEngine(backend)


def chat(stream: bool, **params: Any) -> Request:
    return Request(
        task=Task.CHAT, inbound="tgi", model="m", messages=[Message("user", "hi")], stream=stream, params=params
    )


def chunk(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    obj = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + jsonutil.dumps(obj) + b"\n\n"


def completion(text: str, finish: str = "length") -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11},
    }


async def collect(stream: Any) -> list[Event]:
    out: list[Event] = []
    try:
        while (batch := await stream.next()) is not None:
            out.extend(batch)
    finally:
        await stream.aclose()
    return out


async def test_stream_stop_is_emulated_and_cancels_the_backend(upstream: FakeUpstream, session: Any) -> None:
    frames = [chunk(""), chunk("The answer"), chunk(" is 4"), chunk("2.\nUs"), chunk("er: more")]
    upstream.reply = sse_reply(frames, hang=True, upstream=upstream)
    eng = engine(upstream, session, NoStopOutbound())
    stream = await eng.open_stream(chat(True, stop=["\nUser:"], max_tokens=50), Exchange(time.perf_counter()))
    assert isinstance(stream, StopStream)
    events = await collect(stream)
    texts = "".join(e.text for e in events if isinstance(e, TextDelta))
    finishes = [(e.index, e.reason) for e in events if isinstance(e, FinishEvent)]
    assert texts == "The answer is 42."
    assert finishes == [(0, Finish.STOP_STRING)]
    sent = upstream.last.json
    assert "stop" not in sent
    assert sent["max_completion_tokens"] == 50
    # The upstream notices the gateway hung up: the generation is cancelled.
    await asyncio.wait_for(upstream.disconnected.wait(), 10)


async def test_stream_include_stop(upstream: FakeUpstream, session: Any) -> None:
    upstream.reply = sse_reply([chunk("a END b"), chunk(None, "stop"), b"data: [DONE]\n\n"])
    eng = engine(upstream, session, NoStopOutbound())
    req = chat(True, stop=["END"], include_stop_str_in_output=True)
    events = await collect(await eng.open_stream(req, Exchange(time.perf_counter())))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "a END"
    assert [e.reason for e in events if isinstance(e, FinishEvent)] == [Finish.STOP_STRING]
    assert "include_stop_str_in_output" not in upstream.last.json


async def test_whole_answer_is_cut(upstream: FakeUpstream, session: Any) -> None:
    upstream.reply = json_reply(completion("Hello STOP world"))
    eng = engine(upstream, session, NoStopOutbound())
    result = await eng.complete(chat(False, stop=["STOP"]), Exchange(time.perf_counter()))
    assert isinstance(result, Result)
    assert (result.choices[0].text, result.choices[0].finish) == ("Hello ", Finish.STOP_STRING)
    assert result.usage is not None and result.usage.completion_tokens == 8
    assert "stop" not in upstream.last.json


async def test_whole_answer_without_a_match_is_untouched(upstream: FakeUpstream, session: Any) -> None:
    upstream.reply = json_reply(completion("Hello world", "stop"))
    eng = engine(upstream, session, NoStopOutbound())
    result = await eng.complete(chat(False, stop=["STOP"]), Exchange(time.perf_counter()))
    assert isinstance(result, Result)
    assert (result.choices[0].text, result.choices[0].finish) == ("Hello world", Finish.EOS)


async def test_mapped_stop_is_not_emulated(upstream: FakeUpstream, session: Any) -> None:
    upstream.reply = sse_reply([chunk("a STOP b"), chunk(None, "length"), b"data: [DONE]\n\n"])
    eng = engine(upstream, session)
    stream = await eng.open_stream(chat(True, stop=["STOP"]), Exchange(time.perf_counter()))
    assert not isinstance(stream, StopStream)
    events = await collect(stream)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "a STOP b"
    assert upstream.last.json["stop"] == ["STOP"]
