"""Every stream the gateway reads from a backend, in any framing the SSE rules allow: an event's
data over several `data:` lines (joined with a line end), `data:` without its space, comments,
`event:`/`id:`/`retry:` lines, CRLF or CR line ends, events written one by one or all at once.

A client of the backend's own wire (a pass-through) gets each event as it came, line ends made
LF: framing is never dropped. A translated stream gives the client the same bytes whatever the
framing (but for the ids and times the gateway makes up for each answer).
"""

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.sse import DONE, DONE_FRAME
from tests.conftest import one_route
from tests.support import sse_payloads, sse_reply

FIXTURES = Path(__file__).parent / "fixtures"


def _payloads(name: str) -> list[bytes]:
    return sse_payloads((FIXTURES / name).read_bytes())


def _halves(payload: bytes) -> list[bytes]:
    """The payload cut after its first comma outside a string: two lines of one JSON text."""
    in_string = escaped = False
    for i, c in enumerate(payload):
        if escaped:
            escaped = False
        elif c == 0x5C:  # backslash
            escaped = in_string
        elif c == 0x22:  # quote
            in_string = not in_string
        elif c == 0x2C and not in_string:
            return [payload[: i + 1], payload[i + 1 :]]
    return [payload]


# A framing: (what comes before an event that is none of it, the event's own lines), LF line ends.
Framing = Callable[[bytes, int], tuple[bytes, bytes]]
FRAMINGS: dict[str, Framing] = {
    "no space": lambda p, n: (b"", b"data:" + p + b"\n\n"),
    "two data lines": lambda p, n: (b"", b"".join(b"data: " + line + b"\n" for line in _halves(p)) + b"\n"),
    "comments": lambda p, n: (b": keep-alive\n\n", b": before\ndata: " + p + b"\n: after\n\n"),
    "fields": lambda p, n: (b"", b"event: message\nid: %d\nretry: 3000\ndata: " % n + p + b"\n\n"),
}
LINE_ENDS = {"LF": b"\n", "CRLF": b"\r\n", "CR": b"\r"}
CASES = [(f, e) for f in FRAMINGS for e in LINE_ENDS if e == "LF" or f in ("two data lines", "fields")]


def _stream(payloads: list[bytes], framing: str, line_end: str) -> list[bytes]:
    """Each event's bytes on the wire: what comes before it, then its lines."""
    frame, eol = FRAMINGS[framing], LINE_ENDS[line_end]
    return [b"".join(frame(p, n)).replace(b"\n", eol) for n, p in enumerate(payloads)]


def _relayed(payloads: list[bytes], framing: str, done: bool = True) -> bytes:
    """What a pass-through client gets: the events as they came (LF), and for an OpenAI-style
    stream `[DONE]` as the gateway writes it, at the end."""
    out = b""
    for n, p in enumerate(payloads):
        before, event = FRAMINGS[framing](p, n)
        out += before + (b"" if p == DONE else event)
    return out + DONE_FRAME if done else out


def _writes(events: list[bytes], at_once: bool) -> list[bytes]:
    return [b"".join(events)] if at_once else events


CHAT = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
COMPLETION = {"prompt": "hi", "stream": True, "max_tokens": 16}


@pytest.mark.parametrize("at_once", [False, True], ids=["event by event", "in one write"])
@pytest.mark.parametrize(("framing", "line_end"), CASES)
@pytest.mark.parametrize(
    ("client", "backend", "path", "body", "fixture"),
    [
        ("openai", "openai", "/v1/chat/completions", CHAT, "openai/chat_stream.sse"),
        ("openai", "openai", "/v1/completions", COMPLETION, "openai/completion_stream.sse"),
        ("databricks", "databricks", "/serving-endpoints/m/invocations", CHAT, "databricks/chat_stream.txt"),
        ("triton", "triton", "/v2/models/m/generate_stream", {"text_input": "hi"}, "triton/trtllm_stream.txt"),
        ("triton", "triton", "/v2/models/m/generate_stream", {"text_input": "hi"}, "triton/vllm_stream.txt"),
    ],
    ids=["openai chat", "openai completions", "databricks", "triton trtllm", "triton vllm"],
)
async def test_a_pass_through_client_gets_each_event_as_it_came(
    upstream, make_gateway, client, backend, path, body, fixture, framing, line_end, at_once
):
    payloads = _payloads(fixture)
    upstream.reply = sse_reply(_writes(_stream(payloads, framing, line_end), at_once))
    gw = await make_gateway(one_route(client, backend, upstream.url, model="m"))
    if client == "openai":
        body = {**body, "model": "m", "stream_options": {"include_usage": True}}
    resp = await gw.post(path, json=body)
    assert resp.status == 200
    assert await resp.read() == _relayed(payloads, framing, done=client != "triton")


@pytest.mark.parametrize("at_once", [False, True], ids=["event by event", "in one write"])
@pytest.mark.parametrize(("framing", "line_end"), CASES)
async def test_a_pass_through_renames_the_model_in_events_of_any_framing(
    upstream, make_gateway, framing, line_end, at_once
):
    payloads = _payloads("openai/chat_stream.sse")
    upstream.reply = sse_reply(_writes(_stream(payloads, framing, line_end), at_once))
    gw = await make_gateway(one_route("openai", "openai", upstream.url, model="gpt-4o-mini"))
    body = {**CHAT, "model": "mine", "stream_options": {"include_usage": True}}
    got = await (await gw.post("/v1/chat/completions", json=body)).read()
    assert got == _relayed(payloads, framing).replace(b'"model":"gpt-4o-mini"', b'"model":"mine"')


async def test_an_event_of_two_data_lines_reaches_an_openai_client_whole(upstream, make_gateway):
    """The two lines of one event, as a server may write them: each keeps its `data:`."""
    event = (
        b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",\n'
        b'data: "choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n'
    )
    finish = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'  # noqa: E501
    upstream.reply = sse_reply([event, finish, DONE_FRAME])
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    resp = await gw.post("/v1/chat/completions", json={**CHAT, "model": "m"})
    assert await resp.read() == event + finish + DONE_FRAME


async def test_a_model_name_cut_across_two_data_lines_is_renamed(upstream, make_gateway):
    event = (
        b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":\n'
        b'data: "gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    )
    upstream.reply = sse_reply([event, DONE_FRAME])
    gw = await make_gateway(one_route("openai", "openai", upstream.url, model="gpt-4o-mini"))
    resp = await gw.post("/v1/chat/completions", json={**CHAT, "model": "mine"})
    assert await resp.read() == event.replace(b'"gpt-4o-mini"', b'"mine"') + DONE_FRAME


async def test_a_triton_pass_through_renames_the_model_in_events_of_several_lines(upstream, make_gateway):
    payloads = _payloads("triton/trtllm_stream.txt")
    upstream.reply = sse_reply(_stream(payloads, "two data lines", "CRLF"))
    config = one_route("triton", "triton", upstream.url, model="ensemble")
    config["routes"][0]["models"] = ["llm"]
    gw = await make_gateway(config)
    resp = await gw.post("/v2/models/llm/generate_stream", json={"text_input": "hi"})
    expected = _relayed(payloads, "two data lines", done=False).replace(
        b'"model_name":"ensemble"', b'"model_name":"llm"'
    )
    assert await resp.read() == expected


# ---- translated streams --------------------------------------------------------------------

_MINTED = re.compile(rb'"(id|created)":("[^"]*"|[0-9]+)')


def _unminted(body: bytes) -> bytes:
    """The answer without the ids and times the gateway makes up for each one."""
    return _MINTED.sub(rb'"\1":0', body)


TRANSLATED: list[tuple[str, str, dict[str, Any], str, dict[str, Any], str]] = [
    # (client, backend, backend options, client path, body, backend's stream)
    ("databricks", "openai", {}, "/serving-endpoints/m/invocations", CHAT, "openai/chat_stream.sse"),
    ("tgi", "openai", {}, "/generate_stream", {"inputs": "hi"}, "openai/completion_stream.sse"),
    ("openai", "databricks", {}, "/v1/chat/completions", CHAT, "databricks/chat_stream.txt"),
    ("openai", "tgi", {}, "/v1/completions", COMPLETION, "tgi/generate_stream.txt"),
    ("openai", "mindie", {}, "/v1/completions", COMPLETION, "mindie/infer_token_stream.txt"),
    ("openai", "mindie", {}, "/v1/chat/completions", CHAT, "mindie/chat_stream.txt"),
    ("openai", "mindie", {"full_text": True}, "/v1/chat/completions", CHAT, "mindie/chat_stream_full_text.txt"),
    ("openai", "triton", {"flavor": "trtllm"}, "/v1/completions", COMPLETION, "triton/trtllm_stream.txt"),
    ("openai", "triton", {"flavor": "vllm"}, "/v1/completions", COMPLETION, "triton/vllm_stream.txt"),
    ("openai", "triton", {"flavor": "mindie"}, "/v1/completions", COMPLETION, "triton/mindie_stream.txt"),
]


@pytest.mark.parametrize("at_once", [False, True], ids=["event by event", "in one write"])
@pytest.mark.parametrize(("framing", "line_end"), CASES)
@pytest.mark.parametrize(
    ("client", "backend", "options", "path", "body", "fixture"),
    TRANSLATED,
    ids=[f"{c} from {b} {f.split('/')[1]}" for c, b, _, _, _, f in TRANSLATED],
)
async def test_a_translated_stream_reads_any_framing_alike(
    upstream, make_gateway, client, backend, options, path, body, fixture, framing, line_end, at_once
):
    payloads = _payloads(fixture)
    gw = await make_gateway(one_route(client, backend, upstream.url, model="m", options=options))
    body = {**body, "model": "m"}
    upstream.reply = sse_reply(_writes([b"data: " + p + b"\n\n" for p in payloads], at_once))
    plain = await gw.post(path, json=body)
    assert plain.status == 200
    expected = _unminted(await plain.read())
    assert b"error" not in expected
    upstream.reply = sse_reply(_writes(_stream(payloads, framing, line_end), at_once))
    resp = await gw.post(path, json=body)
    assert _unminted(await resp.read()) == expected


# ---- the end of a stream ---------------------------------------------------------------------

TRITON_ERROR = b'data: {"error":"in ensemble \'ensemble\', Executor failed: out of memory"}'


@pytest.mark.parametrize("end", [b"", b"\n", b"\r\n"], ids=["no line end", "LF", "CRLF"])
async def test_a_triton_stream_that_ends_on_an_error_without_its_blank_line_says_it(upstream, make_gateway, end):
    """Triton's streams have no terminator: their last event counts without its blank line."""
    upstream.reply = sse_reply([TRITON_ERROR + end])
    gw = await make_gateway(one_route("triton", "triton", upstream.url, model="ensemble"))
    resp = await gw.post("/v2/models/ensemble/generate_stream", json={"text_input": "hi"})
    assert resp.status == 500
    assert (await resp.json())[
        "error"
    ] == "backend error mid-stream: in ensemble 'ensemble', Executor failed: out of memory"
    text = b'data: {"model_name":"ensemble","model_version":"1","text_output":" Machine"}\n\n'
    upstream.reply = sse_reply([text, TRITON_ERROR + end])
    gw = await make_gateway(one_route("openai", "triton", upstream.url, model="ensemble"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "hi", "stream": True})
    events = sse_payloads(await resp.read())
    assert b" Machine" in events[0] and b"Executor failed: out of memory" in events[-2] and events[-1] == DONE
