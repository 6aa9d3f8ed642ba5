"""Stop-string emulation wired into the proxy engine, against a real (fake) upstream server.

A backend codec that cannot send stop strings says so with Fate.EMULATE; the engine then cuts
whole answers itself and wraps streams so that a matched stop ends the stream and cuts the
upstream connection.
"""

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import config as cfg
from gateway import jsonutil
from gateway.adapters.stops import StopStream
from gateway.codec.contract import BackendView, Carriage, Outgoing, UpstreamCall
from gateway.dialects.registry import get as get_dialect
from gateway.neutral import params as neutral_params
from gateway.neutral.events import Event, FinishEvent, TextDelta
from gateway.neutral.params import Fate
from gateway.neutral.types import Finish, Message, Request, Result, Task
from gateway.proxy.engine import ProxyEngine
from gateway.proxy.plan import Plan
from gateway.proxy.routing import build_backend
from gateway.upstream import AnswerBudget, Pool
from tests.support import FakeUpstream, json_reply, sse_reply


class NoStopOutbound:
    """The OpenAI codec, posing as a backend without stop strings (as MindIE native or Triton)."""

    def __init__(self) -> None:
        self._inner: Any = get_dialect("openai").outbound
        self.name = "openai"
        self.options_model = self._inner.options_model

    def carriage(self, req: Request, backend: BackendView) -> Carriage:
        inner: Carriage = self._inner.carriage(req, backend)
        fates = {**inner.fates, "stop": Fate.EMULATE, "include_stop_str_in_output": Fate.EMULATE}
        return Carriage(fates, inner.variant)

    def build(self, out: Outgoing) -> UpstreamCall:
        # A codec with an emulated stop does not map it.
        kept = out.req.params.replace(stop=None, include_stop_str_in_output=None)
        return self._inner.build(dataclasses.replace(out, req=out.req.but(params=kept)))  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
async def session() -> AsyncIterator[Pool]:
    s = Pool(16)
    yield s
    await s.close()


def engine(upstream: FakeUpstream, session: Pool, outbound: Any = None) -> ProxyEngine:
    d = get_dialect("openai")
    if outbound is not None:
        d = dataclasses.replace(d, outbound=outbound)
    conf = cfg.Backend(dialect="openai", url=upstream.url)
    backend = build_backend("up", conf, d)
    backend.pool = session
    return ProxyEngine(backend, cfg.Limits().max_answer_bytes, AnswerBudget(cfg.Limits().max_buffered_answer_bytes))


def plan(eng: ProxyEngine, req: Request) -> Plan:
    return eng.plan(req, "req-1", 0, 16)


def chat(stream: bool, **params: Any) -> Request:
    # Neutral values: lists are tuples.
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
    return Request(
        task=Task.CHAT,
        wire="tgi",
        model="m",
        messages=[Message("user", "hi")],
        stream=stream,
        params=neutral_params.make(values),
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
    stream = await eng.open_stream(plan(eng, chat(True, stop=["\nUser:"], max_tokens=50)))
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
    events = await collect(await eng.open_stream(plan(eng, req)))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "a END"
    assert [e.reason for e in events if isinstance(e, FinishEvent)] == [Finish.STOP_STRING]
    assert "include_stop_str_in_output" not in upstream.last.json


async def test_whole_answer_is_cut(upstream: FakeUpstream, session: Any) -> None:
    upstream.reply = json_reply(completion("Hello STOP world"))
    eng = engine(upstream, session, NoStopOutbound())
    result = await eng.complete(plan(eng, chat(False, stop=["STOP"])))
    assert isinstance(result, Result)
    assert (result.choices[0].text, result.choices[0].finish) == ("Hello ", Finish.STOP_STRING)
    assert result.usage is not None and result.usage.completion_tokens == 8
    assert "stop" not in upstream.last.json


async def test_whole_answer_without_a_match_is_untouched(upstream: FakeUpstream, session: Any) -> None:
    upstream.reply = json_reply(completion("Hello world", "stop"))
    eng = engine(upstream, session, NoStopOutbound())
    result = await eng.complete(plan(eng, chat(False, stop=["STOP"])))
    assert isinstance(result, Result)
    assert (result.choices[0].text, result.choices[0].finish) == ("Hello world", Finish.EOS)


async def test_mapped_stop_is_not_emulated(upstream: FakeUpstream, session: Any) -> None:
    upstream.reply = sse_reply([chunk("a STOP b"), chunk(None, "length"), b"data: [DONE]\n\n"])
    eng = engine(upstream, session)
    stream = await eng.open_stream(plan(eng, chat(True, stop=["STOP"])))
    assert not isinstance(stream, StopStream)
    events = await collect(stream)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "a STOP b"
    assert upstream.last.json["stop"] == ["STOP"]
