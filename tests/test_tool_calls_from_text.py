"""Tool calls a model wrote as text, read by the gateway for a backend that carries only text (a
scripted TGI server, byte for byte TGI's wire): calls become OpenAI tool calls, a malformed call
comes back as the text it was (never a 500) and is counted in the access line and the metrics;
and the stream wrapper's own rules (choices, finish reasons, text around calls)."""

import logging
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import jsonutil
from gateway.adapters.toolcalls import get_parser
from gateway.adapters.tooluse import ToolReading, ToolStream
from gateway.neutral.events import Event, FinishEvent, TextDelta, TextRun, ToolCallDelta, UsageEvent
from gateway.neutral.types import Finish, Usage
from tests.conftest import one_route
from tests.support import json_reply, sse_json, sse_reply
from tests.tokenizer_kit import tokenizer_folder_fixture  # noqa: F401

TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {}}}},
    }
]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
BROKEN = '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>'


def tgi_whole(text: str) -> Any:
    details = {"finish_reason": "eos_token", "generated_tokens": 7, "seed": None, "prefill": [], "tokens": []}
    return json_reply({"generated_text": text, "details": details})


def tgi_stream(pieces: list[str]) -> Any:
    frames = []
    for k, piece in enumerate(pieces):
        final = k == len(pieces) - 1
        event = {
            "index": k,
            "token": {"id": k, "text": piece, "logprob": -0.1, "special": False},
            "generated_text": "".join(pieces) if final else None,
            "details": {"finish_reason": "eos_token", "generated_tokens": len(pieces), "seed": None} if final else None,
        }
        frames.append(b"data:" + jsonutil.dumps(event) + b"\n\n")
    return sse_reply(frames)


def pieces(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.fixture
async def gw(upstream, make_gateway, tokenizer_folder):
    return await make_gateway(
        one_route("openai", "tgi", upstream.url, tokenizer=tokenizer_folder, tool_parser="hermes")
    )


def ask(**more: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "weather in Paris?"}], "tools": TOOLS, **more}


async def metric(gw: Any, name: str) -> float:
    text = await (await gw.get("/metrics")).text()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


async def test_a_call_in_the_text_is_a_tool_call_and_the_tools_reach_the_prompt(gw, upstream):
    upstream.reply = tgi_whole("Let me look.\n" + CALL)
    r = await gw.post("/v1/chat/completions", json=ask())
    assert r.status == 200
    choice = (await r.json())["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me look."
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert call["id"].startswith("call_") and call["type"] == "function"
    sent = upstream.last.json
    assert '"name": "get_weather"' in sent["inputs"]  # rendered by the chat template
    assert "grammar" not in sent["parameters"]


async def test_a_malformed_call_comes_back_as_text_and_is_counted(gw, upstream, caplog):
    caplog.set_level(logging.INFO)
    upstream.reply = tgi_whole(BROKEN)
    r = await gw.post("/v1/chat/completions", json=ask())
    assert r.status == 200
    choice = (await r.json())["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["content"] == BROKEN
    assert not choice["message"].get("tool_calls")
    upstream.reply = tgi_stream(pieces(BROKEN))
    r = await gw.post("/v1/chat/completions", json=ask(stream=True))
    chunks = [c for c in sse_json(await r.read()) if isinstance(c, dict)]
    text = "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])
    assert text == BROKEN
    assert not any(ch["delta"].get("tool_calls") for c in chunks for ch in c["choices"])
    lines = [rec.access for rec in caplog.records if rec.name == "gateway.access"]
    assert [a["tool_parse_failures"] for a in lines] == [1, 1]
    assert await metric(gw, "gateway_tool_call_parse_failures_total") == 2


async def test_a_streamed_call_goes_out_whole_after_the_text_before_it(gw, upstream, caplog):
    caplog.set_level(logging.INFO)
    upstream.reply = tgi_stream(pieces("Sure. " + CALL + CALL, 2))
    r = await gw.post("/v1/chat/completions", json=ask(stream=True))
    chunks = [c for c in sse_json(await r.read()) if isinstance(c, dict)]
    deltas = [ch["delta"] for c in chunks for ch in c["choices"]]
    text = "".join(d.get("content") or "" for d in deltas)
    calls = [tc for d in deltas for tc in d.get("tool_calls") or ()]
    assert text == "Sure."
    assert [(tc["index"], tc["function"]["name"], tc["function"]["arguments"]) for tc in calls] == [
        (0, "get_weather", '{"city":"Paris"}'),
        (1, "get_weather", '{"city":"Paris"}'),
    ]
    assert all(tc["id"].startswith("call_") for tc in calls)
    assert [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]] == ["tool_calls"]
    assert [rec.access["tool_parse_failures"] for rec in caplog.records if rec.name == "gateway.access"] == [0]


async def test_a_request_without_tools_is_read_as_it_is(gw, upstream, caplog):
    caplog.set_level(logging.INFO)
    upstream.reply = tgi_whole(CALL)
    r = await gw.post("/v1/chat/completions", json={**ask(), "tools": None})
    choice = (await r.json())["choices"][0]
    assert choice["message"]["content"] == CALL and choice["finish_reason"] == "stop"
    assert [rec.access.get("tool_parse_failures") for rec in caplog.records if rec.name == "gateway.access"] == [None]


async def test_a_forced_call_is_held_by_a_grammar_and_read_as_a_bare_list(gw, upstream):
    upstream.reply = tgi_whole('[{"name": "get_weather", "arguments": {"city": "Oslo"}}]')
    r = await gw.post("/v1/chat/completions", json=ask(tool_choice="required"))
    choice = (await r.json())["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["arguments"] == '{"city":"Oslo"}'
    grammar = upstream.last.json["parameters"]["grammar"]
    assert grammar["type"] == "json" and grammar["value"]["type"] == "array"
    assert grammar["value"]["items"]["anyOf"][0]["properties"]["name"] == {"type": "string", "enum": ["get_weather"]}


async def test_a_forced_call_with_a_response_format_is_refused(gw, upstream):
    fmt = {"type": "json_object"}
    r = await gw.post("/v1/chat/completions", json=ask(tool_choice="required", response_format=fmt))
    assert r.status == 400 and "response_format" in (await r.json())["error"]["message"]
    assert not upstream.requests


async def test_a_format_that_cannot_be_forced_is_refused_with_a_forced_choice(upstream, make_gateway, tokenizer_folder):
    gw = await make_gateway(
        one_route("openai", "tgi", upstream.url, tokenizer=tokenizer_folder, tool_parser="pythonic")
    )
    r = await gw.post("/v1/chat/completions", json=ask(tool_choice="required"))
    assert r.status == 400 and "cannot be forced" in (await r.json())["error"]["message"]
    assert not upstream.requests


async def test_tool_choice_none_renders_no_tools(gw, upstream):
    upstream.reply = tgi_whole(CALL)
    r = await gw.post("/v1/chat/completions", json=ask(tool_choice="none"))
    choice = (await r.json())["choices"][0]
    assert choice["message"]["content"] == CALL and not choice["message"].get("tool_calls")
    assert "get_weather" not in upstream.last.json["inputs"]


async def test_parallel_tool_calls_false_keeps_the_first_call_only(gw, upstream):
    upstream.reply = tgi_whole(CALL + CALL)
    r = await gw.post("/v1/chat/completions", json=ask(parallel_tool_calls=False))
    assert r.status == 200 and "X-Gateway-Dropped-Params" not in r.headers
    assert len((await r.json())["choices"][0]["message"]["tool_calls"]) == 1
    upstream.reply = tgi_stream(pieces(CALL + CALL))
    r = await gw.post("/v1/chat/completions", json=ask(parallel_tool_calls=False, stream=True))
    chunks = [c for c in sse_json(await r.read()) if isinstance(c, dict)]
    assert [tc["index"] for c in chunks for ch in c["choices"] for tc in ch["delta"].get("tool_calls") or ()] == [0]


# ---- the stream wrapper on its own ------------------------------------------------------------


class Scripted:
    def __init__(self, batches: list[list[Event]]) -> None:
        self.batches = list(batches)
        self.closed = False

    async def next(self) -> list[Event] | None:
        return self.batches.pop(0) if self.batches else None

    async def aclose(self) -> None:
        self.closed = True


async def drain(stream: Any) -> list[Event]:
    out: list[Event] = []
    while (batch := await stream.next()) is not None:
        out += batch
    return out


def reading() -> ToolReading:
    return ToolReading(get_parser("hermes"), tuple(TOOLS))


async def test_each_choice_is_read_on_its_own_and_keeps_its_index():
    batches: list[list[Event]] = [
        [TextDelta(p, 0) for p in pieces(CALL)] + [TextRun(pieces("plain answer"), 1)],
        [FinishEvent(Finish.EOS, 0), FinishEvent(Finish.LENGTH, 1), UsageEvent(Usage(3, 9))],
    ]
    out = await drain(ToolStream(Scripted(batches), reading()))
    calls = [e for e in out if type(e) is ToolCallDelta]
    assert {e.index for e in calls} == {0}
    assert "".join(e.arguments for e in calls) == '{"city":"Paris"}'
    assert "".join(e.text for e in out if type(e) is TextDelta and e.index == 1) == "plain answer"
    assert [(e.reason, e.index) for e in out if type(e) is FinishEvent] == [(Finish.TOOL_CALLS, 0), (Finish.LENGTH, 1)]
    assert out[-1] == UsageEvent(Usage(3, 9))


@pytest.mark.parametrize("size", [1, 2, 5, 200])
async def test_runs_of_tokens_are_read_as_the_whole_text_is(size):
    text = "Sure thing. The answer\nfollows " + CALL + " done."
    tokens = pieces(text, size)
    runs: list[list[Event]] = [[TextRun(tokens[k : k + 7])] for k in range(0, len(tokens), 7)]
    out = await drain(ToolStream(Scripted([*runs, [FinishEvent(Finish.EOS)]]), reading()))
    shown = "".join("".join(e.texts) if type(e) is TextRun else e.text for e in out if type(e) in (TextRun, TextDelta))
    whole = get_parser("hermes").parse(text, TOOLS)
    assert shown == whole.content
    calls = [e for e in out if type(e) is ToolCallDelta]
    assert [(c.name, c.arguments) for c in calls] == [(k.name, k.arguments) for k in whole.calls]
    assert [e.reason for e in out if type(e) is FinishEvent] == [Finish.TOOL_CALLS]


async def test_a_choice_cut_by_length_inside_its_call_keeps_its_finish():
    out = await drain(ToolStream(Scripted([[TextDelta(CALL[:40])], [FinishEvent(Finish.LENGTH)]]), reading()))
    assert [e.reason for e in out if type(e) is FinishEvent] == [Finish.LENGTH]


async def test_held_back_text_goes_out_when_the_stream_ends_without_a_finish():
    r = reading()
    out = await drain(ToolStream(Scripted([[TextDelta("done <tool")]]), r))
    assert "".join(e.text for e in out if type(e) is TextDelta) == "done <tool"
    assert r.failures == 0


async def test_log_probabilities_of_held_text_ride_on_the_text_that_goes_out():
    batch: list[Event] = [TextDelta("a <", 0, [{"token": "a <"}], [1]), TextDelta("b", 0, [{"token": "b"}], [2])]
    out = await drain(ToolStream(Scripted([batch]), reading()))
    texts = [e for e in out if type(e) is TextDelta]
    assert "".join(e.text for e in texts) == "a <b"
    assert [lp for e in texts for lp in e.logprobs or ()] == [{"token": "a <"}, {"token": "b"}]
    assert [i for e in texts for i in e.token_ids or ()] == [1, 2]


async def test_closing_the_wrapper_closes_the_stream_under_it():
    inner = Scripted([])
    await ToolStream(inner, reading()).aclose()
    assert inner.closed
