"""The gateway's Anthropic bytes against the API's recorded answers (tests/fixtures/anthropic,
README there) and the SDK's types: each recorded answer read into the neutral form and rendered
back gives the same events, fields in the same order; an Anthropic backend's answer reaches an
Anthropic client byte for byte."""

from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from gateway import jsonutil
from gateway.codec.contract import RenderContext
from gateway.dialects.anthropic import reading, render
from gateway.dialects.anthropic.inbound import parse_messages
from gateway.neutral.events import Event, FinishEvent, ReasoningDelta, TextDelta, ToolCallDelta, UsageEvent
from gateway.neutral.types import Choice, Finish, Result, Usage
from tests.conftest import one_route
from tests.support import raw_reply, sse_reply

FIX = Path(__file__).parent / "fixtures" / "anthropic"
EVENTS = TypeAdapter(RawMessageStreamEvent)
# What the API writes that a self-hosted backend has no word for: left out by the gateway.
NOT_RENDERED = {"caller", "stop_details", "service_tier", "cache_creation", "inference_geo", "output_tokens_details"}
NOT_RENDERED |= {"iterations"}
CTX = RenderContext(request_id="r1", created=0, model="m")


def request(**more: Any) -> Any:
    body = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], **more}
    return parse_messages(jsonutil.dumps(body))


def named_events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, its data) for each event of an Anthropic stream."""
    out = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = dict(line.split(b": ", 1) for line in block.split(b"\n") if line)
        if lines:
            out.append((lines[b"event"].decode(), jsonutil.loads(lines[b"data"])))
    return out


def _comparable(value: Any) -> Any:
    """A value with what the gateway does not render left out, ids and names made equal and
    usage left to its own checks; key order kept (json.dumps of it compares order too)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in NOT_RENDERED or k == "usage":
                continue
            out[k] = "*" if k in ("id", "model", "signature") else _comparable(v)
        return out
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def _rendered_kind(name: str, data: dict[str, Any]) -> bool:
    """Events the gateway writes: no pings (its own, in silences only), no empty deltas, no
    signature deltas (a backend signs nothing)."""
    if name == "ping":
        return False
    delta = data.get("delta") or {}
    if delta.get("type") == "signature_delta":
        return False
    return not any(delta.get(k) == "" for k in ("text", "thinking", "partial_json"))


def through_the_gateway(recorded: bytes) -> bytes:
    """A recorded stream read as a backend's, then rendered for a client."""
    parser = reading.MessagesStreamParser()
    if not recorded.endswith(b"\n\n"):
        recorded += b"\n\n"
    events: list[Event] = parser.feed(recorded) + parser.close()
    r = render.MessageStream(request(), CTX)
    return r.start() + r.render(events) + r.end()


@pytest.mark.parametrize(
    "name",
    ["sdk_basic_stream.sse", "sdk_tool_use_stream.sse", "sdk_max_tokens_stream.sse", "vllm_max_tokens_stream.sse"],
)
def test_a_recorded_stream_comes_out_as_recorded(name: str):
    recorded = (FIX / name).read_bytes()
    ours = named_events(through_the_gateway(recorded))
    theirs = [(n, d) for n, d in named_events(recorded) if _rendered_kind(n, d)]
    if name == "sdk_max_tokens_stream.sse":
        # This recording leaves the block that max_tokens cut open; the gateway closes every block.
        theirs.insert(-2, ("content_block_stop", {"type": "content_block_stop", "index": 1}))
    assert [n for n, _ in ours] == [n for n, _ in theirs]
    for (event, mine), (_, recorded_data) in zip(ours, theirs, strict=True):
        EVENTS.validate_python(mine)
        a, b = _comparable(mine), _comparable(recorded_data)
        if event == "message_start" or name.startswith("vllm"):
            # The message's own field order changed over the API's versions (the newest is held
            # below); vLLM writes its fields in an order of its own.
            assert a == b
        else:
            assert jsonutil.dumps(a) == jsonutil.dumps(b)
    # The output count is the backend's; the message's fields come in the API's current order.
    assert ours[-2][1]["usage"]["output_tokens"] == theirs[-2][1]["usage"]["output_tokens"]
    newest = named_events((FIX / "sdk_thinking_stream.sse").read_bytes())[0][1]["message"]
    assert list(ours[0][1]["message"]) == [k for k in newest if k not in NOT_RENDERED]


def test_a_thinking_block_streams_as_recorded_but_for_its_signature():
    recorded = (FIX / "sdk_thinking_stream.sse").read_bytes()
    ours = named_events(through_the_gateway(recorded))
    theirs = [(n, d) for n, d in named_events(recorded) if _rendered_kind(n, d)]
    assert [n for n, _ in ours] == [n for n, _ in theirs]
    blocks = [d["content_block"] for n, d in ours if n == "content_block_start"]
    assert blocks == [{"type": "thinking", "thinking": "", "signature": ""}, {"type": "text", "text": ""}]
    assert ours[-2][1]["delta"]["stop_reason"] == "refusal"


@pytest.mark.parametrize("name", ["sdk_message.json", "vllm_stop_sequence.json", "vllm_max_tokens.json"])
def test_a_recorded_message_comes_out_as_recorded(name: str):
    recorded = jsonutil.loads((FIX / name).read_bytes())
    req = request(stop_sequences=["a"]) if recorded.get("stop_sequence") else request()
    ours = jsonutil.loads(render.render_result(reading.parse_body((FIX / name).read_bytes()), req, CTX))
    Message.model_validate(ours)
    assert ours["usage"]["input_tokens"] == recorded["usage"]["input_tokens"]
    assert ours["usage"]["output_tokens"] == recorded["usage"]["output_tokens"]
    expected = _comparable(recorded)
    if name.startswith("vllm"):
        # vLLM writes the fields in an older order of its own (and leaves out a null stop_sequence).
        order = ["model", "id", "type", "role", "content", "stop_reason", "stop_sequence"]
        expected = {k: expected.get(k) for k in order}
    assert jsonutil.dumps(_comparable(ours)) == jsonutil.dumps(expected)


CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


@pytest.mark.parametrize(
    ("choice", "stop", "blocks"),
    [
        (Choice(text="Hi", finish=Finish.EOS), "end_turn", ["text"]),
        (Choice(text="Hi", finish=Finish.LENGTH), "max_tokens", ["text"]),
        (Choice(text="Hi", finish=Finish.STOP_STRING), "stop_sequence", ["text"]),
        (Choice(text="", tool_calls=[CALL], finish=Finish.TOOL_CALLS), "tool_use", ["tool_use"]),
        (
            Choice(text="ok", reasoning="think", tool_calls=[CALL], finish=Finish.EOS),
            "tool_use",
            ["thinking", "text", "tool_use"],
        ),
    ],
)
def test_every_stop_reason_and_block_is_the_sdks_type_whole_and_streamed(choice: Choice, stop: str, blocks: list[str]):
    req = request(stop_sequences=["END"])
    whole = Message.model_validate_json(render.render_result(Result([choice], Usage(7, 3)), req, CTX))
    assert whole.stop_reason == stop and [b.type for b in whole.content] == blocks
    assert whole.stop_sequence == ("END" if stop == "stop_sequence" else None)
    events: list[Event] = [UsageEvent(Usage(7, None))]
    if choice.reasoning:
        events.append(ReasoningDelta(choice.reasoning))
    if choice.text:
        events.append(TextDelta(choice.text))
    for k, call in enumerate(choice.tool_calls or ()):
        events += [
            ToolCallDelta(k, call["id"], call["function"]["name"]),
            ToolCallDelta(k, arguments=call["function"]["arguments"]),
        ]
    events += [FinishEvent(choice.finish or Finish.EOS), UsageEvent(Usage(7, 3))]
    r = render.MessageStream(req, CTX)
    streamed = named_events(r.start() + r.render(events) + r.end())
    for _, data in streamed:
        EVENTS.validate_python(data)
    assert streamed[-2][1]["delta"] == {"stop_reason": stop, "stop_sequence": whole.stop_sequence}
    if choice.tool_calls:
        (use,) = [b for b in whole.content if b.type == "tool_use"]
        assert use.id == "toolu_call_1" and use.input == {"city": "Paris"}  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["sdk_tool_use_stream.sse", "sdk_thinking_stream.sse", "vllm_max_tokens_stream.sse"])
async def test_an_anthropic_backends_stream_reaches_its_client_byte_for_byte(upstream, make_gateway, name):
    recorded = (FIX / name).read_bytes()
    model = named_events(recorded)[0][1]["message"]["model"]
    frames = [f + b"\n\n" for f in recorded.split(b"\n\n") if f.strip()]
    upstream.reply = sse_reply(frames)
    gw = await make_gateway(one_route("anthropic", "anthropic", upstream.url))
    body = {"model": model, "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    resp = await gw.post("/v1/messages?beta=true", json=body, headers={"x-api-key": "k", "anthropic-beta": "x-1"})
    assert resp.status == 200
    assert await resp.read() == b"".join(frames)
    assert upstream.last.json == body and upstream.last.headers["anthropic-version"] == "2023-06-01"


async def test_an_anthropic_backends_message_reaches_its_client_renamed_only(upstream, make_gateway):
    recorded = (FIX / "sdk_message.json").read_bytes()
    upstream.reply = raw_reply(recorded)
    config = one_route("anthropic", "anthropic", upstream.url, model="claude-sonnet-4-5-20250929")
    gw = await make_gateway(config)
    resp = await gw.post(
        "/v1/messages", json={"model": "mine", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}]}
    )
    assert await resp.read() == recorded.replace(b'"claude-sonnet-4-5-20250929"', b'"mine"', 1)
    assert upstream.last.json["model"] == "claude-sonnet-4-5-20250929"
