"""The gateway's Responses API held against OpenAI's own bytes (tests/fixtures/responses: a
response recorded from the public API, the API reference's streamed example) and against vLLM's
own /v1/responses, which a route in front of a server of the API hands over byte for byte."""

from pathlib import Path
from typing import Any

from aiohttp import web

from gateway import jsonutil
from gateway.dialects.responses import reading
from gateway.neutral.events import Frame
from tests.conftest import one_route
from tests.support import Recorded, json_reply, raw_reply, responses_events, sdk_event, sse_reply

FIXTURES = Path(__file__).parent / "fixtures" / "responses"
CHAT = {
    "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there!"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 14, "completion_tokens": 3, "total_tokens": 17},
}  # fmt: skip


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def in_order(keys: list[str], within: list[str]) -> bool:
    """Whether `keys` appear in `within` in the same order (others may come between)."""
    at = iter(within)
    return all(k in at for k in keys)


def chat_route(url: str) -> dict[str, Any]:
    return one_route("openai", "openai", url, options={"responses_api": False})


def example_events() -> list[dict[str, Any]]:
    """The API reference's streamed example, its `...` line (the deltas between) left out."""
    text = fixture("openapi_stream.txt").decode()
    blocks = [b for b in text.split("\n\n") if b.strip() and b.strip() != "..."]
    return responses_events("\n\n".join(blocks).encode() + b"\n\n")


async def test_a_whole_response_has_the_recorded_responses_fields_in_their_order(upstream, make_gateway):
    recorded = jsonutil.loads(fixture("live_response.json"))
    upstream.reply = json_reply(CHAT)
    gw = await make_gateway(chat_route(upstream.url))
    ours = await (await gw.post("/v1/responses", json={"model": "m", "input": "hi"})).json()
    assert in_order(list(recorded), list(ours))
    # The fields the recording lacks are the API's later ones.
    assert set(ours) - set(recorded) == {"completed_at"}
    assert list(ours["output"][0]) == list(recorded["output"][0])
    assert list(ours["output"][0]["content"][0]) == list(recorded["output"][0]["content"][0])
    assert in_order(list(recorded["usage"]), list(ours["usage"]))
    for key in ("reasoning", "text"):
        assert list(ours[key]) == list(recorded[key])
    assert {k: ours[k] for k in ("status", "service_tier", "store", "truncation", "top_logprobs", "tool_choice")} == {
        k: recorded[k] for k in ("status", "service_tier", "store", "truncation", "top_logprobs", "tool_choice")
    }


async def test_a_stream_has_the_reference_examples_events_with_their_fields(upstream, make_gateway):
    example = example_events()
    upstream.reply = json_reply(CHAT)
    frames = [
        b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n',  # noqa: E501
        b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" there!"},"finish_reason":"stop"}]}\n\n',  # noqa: E501
        b"data: [DONE]\n\n",
    ]  # fmt: skip
    upstream.reply = sse_reply(frames)
    gw = await make_gateway(chat_route(upstream.url))
    resp = await gw.post("/v1/responses", json={"model": "m", "input": "Hello!", "stream": True})
    ours = responses_events(await resp.read())
    deltas = [ev for ev in ours if ev["type"] == "response.output_text.delta"]
    assert [ev["delta"] for ev in deltas] == ["Hi", " there!"]
    # The same events in the same order, the deltas aside (the example shows one).
    assert [ev["type"] for ev in ours if ev not in deltas[1:]] == [ev["type"] for ev in example]
    for mine, theirs in zip([ev for ev in ours if ev not in deltas[1:]], example, strict=True):
        sdk_event(mine)
        assert set(theirs) - {"response"} <= set(mine), mine["type"]
        for key in ("item", "part"):
            if key in theirs:
                assert set(theirs[key]) <= set(mine[key]), (mine["type"], key)
        if "response" in theirs:
            assert set(theirs["response"]) - {"usage"} <= set(mine["response"]), mine["type"]


async def test_a_function_call_answer_has_the_reference_items_fields(upstream, make_gateway):
    example = jsonutil.loads(fixture("openapi_function_call.json"))
    call = {"id": "call_1", "type": "function", "function": {"name": "get_current_weather", "arguments": "{}"}}
    answer = {**CHAT, "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}]}  # fmt: skip  # noqa: E501
    upstream.reply = json_reply(answer)
    gw = await make_gateway(chat_route(upstream.url))
    body = {"model": "m", "input": "weather?", "tools": example["tools"], "tool_choice": "auto"}
    ours = await (await gw.post("/v1/responses", json=body)).json()
    assert set(ours["output"][0]) == set(example["output"][0])
    assert ours["tools"] == example["tools"]  # echoed as given


async def test_a_route_to_a_server_of_the_api_hands_its_answer_over_byte_for_byte(upstream, make_gateway):
    body = fixture("vllm_response.json")
    upstream.reply = raw_reply(body)
    gw = await make_gateway(one_route("openai", "openai", upstream.url, options={"extensions": "vllm"}))
    request = {"model": "tiny", "input": "Hello", "max_output_tokens": 4, "metadata": {"k": "v"}}
    resp = await gw.post("/v1/responses", json=request)
    assert await resp.read() == body
    assert upstream.last.path == "/v1/responses" and upstream.last.json == request
    # Kept for the client: what it was answered.
    rid = jsonutil.loads(body)["id"]
    assert await (await gw.get(f"/v1/responses/{rid}")).read() == body


async def test_a_passed_through_stream_is_the_servers_own_and_its_usage_is_counted(upstream, make_gateway):
    stream = fixture("vllm_stream.txt")
    events = stream.split(b"\n\n")
    upstream.reply = sse_reply([e + b"\n\n" for e in events[:-1]])
    gw = await make_gateway(one_route("openai", "openai", upstream.url, options={"extensions": "vllm"}))
    resp = await gw.post("/v1/responses", json={"model": "tiny", "input": "Hello", "stream": True})
    assert await resp.read() == stream
    metrics = await (await gw.get("/metrics")).text()
    final = responses_events(stream)[-1]["response"]
    usage = final["usage"]
    assert f'gateway_tokens_total{{backend="up",kind="prompt",route="r"}} {float(usage["input_tokens"])}' in metrics
    assert (
        f'gateway_tokens_total{{backend="up",kind="completion",route="r"}} {float(usage["output_tokens"])}' in metrics
    )
    assert 'gateway_time_to_first_token_seconds_count{backend="up",route="r"} 1.0' in metrics
    kept = await (await gw.get(f"/v1/responses/{final['id']}")).json()
    assert kept == final


async def test_a_passed_through_answer_is_renamed_where_the_route_renames_the_model(upstream, make_gateway):
    upstream.reply = raw_reply(fixture("vllm_response.json"))
    gw = await make_gateway(one_route("openai", "openai", upstream.url, model="tiny"))
    resp = await gw.post("/v1/responses", json={"model": "my-name", "input": "Hello"})
    got = await resp.json()
    assert got["model"] == "my-name" and upstream.last.json["model"] == "tiny"
    assert {**got, "model": "tiny"} == jsonutil.loads(fixture("vllm_response.json"))


def test_only_the_responses_own_model_is_renamed() -> None:
    """In place when the first `model` field is the response's; a client's metadata naming a
    `model` before it, or a key written with escapes, leaves the rest as it was."""
    name = jsonutil.dumps("mine")
    cases = [
        b'{"id":"r","model":"tiny","output":[]}',
        b'{"id":"r", "model" : "tiny","metadata":{"model":"x"}}',
        b'{"id":"r","model":"t\\u0069ny","output":[]}',
        b'{"type":"response.created","response":{"model":"tiny"}}',
    ]
    for data in cases:
        want = data.replace(b'"tiny"', b'"mine"').replace(b'"t\\u0069ny"', b'"mine"')
        assert reading.renamed_response(data, name) == want
    anew = [
        b'{"id":"r","metadata":{"model":"x"},"model":"tiny"}',
        b'{"id":"r","metadata":{"model":"x"},"\\u006dodel":"tiny"}',
        b'{"id":"r","model":null,"metadata":{"model":"x"}}',
        b'{"type":"response.completed","response":{"metadata":{"model":"x"},"model":"tiny"}}',
    ]
    for data in anew:
        got, obj = jsonutil.loads(reading.renamed_response(data, name)), jsonutil.loads(data)
        response = {**obj.get("response", obj), "model": "mine"}
        assert got == ({**obj, "response": response} if "response" in obj else response)
        assert got.get("response", got)["metadata"] == {"model": "x"}


def test_a_passed_through_stream_renames_only_the_responses_model() -> None:
    """An event whose response names its model once is renamed in its own lines; one whose
    client metadata names a `model` first is written anew, the metadata left as it was."""
    created = b'{"type":"response.created","response":{"id":"r","model":"tiny","output":[]}}'
    echoed = b'{"type":"response.in_progress","response":{"id":"r","metadata":{"model":"x"},"model":"tiny"}}'
    stream = (
        b"event: response.created\ndata: " + created + b"\n\nevent: response.in_progress\ndata: " + echoed + b"\n\n"
    )
    parser = reading.ResponsesStreamParser(True, jsonutil.dumps("mine"))
    frames = [e.payload for e in parser.feed(stream) if isinstance(e, Frame)]
    assert frames[0] == b"event: response.created\ndata: " + created.replace(b'"tiny"', b'"mine"') + b"\n\n"
    assert frames[1].startswith(b"event: response.in_progress\ndata: ")
    got = jsonutil.loads(frames[1].split(b"data: ", 1)[1])
    assert got["response"] == {"id": "r", "metadata": {"model": "x"}, "model": "mine"}


async def test_errors_before_the_stream_starts_are_openais_error_body(upstream, make_gateway):
    async def refuse(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.json_response({"error": {"message": "no such model", "type": "invalid_request_error"}}, status=404)

    upstream.reply = refuse
    gw = await make_gateway(chat_route(upstream.url))
    resp = await gw.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert resp.status == 404
    err = (await resp.json())["error"]
    assert set(err) == {"message", "type", "param", "code"} and "no such model" in err["message"]
    bad = await gw.post("/v1/responses", json={"model": "m", "input": "x", "temperature": 3})
    assert bad.status == 400 and (await bad.json())["error"]["param"] == "temperature"
    background = await gw.post("/v1/responses", json={"model": "m", "input": "x", "background": True})
    assert background.status == 400 and (await background.json())["error"]["param"] == "background"


async def test_a_fault_after_the_stream_started_is_a_failed_response(upstream, make_gateway):
    frames = [
        b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n',  # noqa: E501
        b'data: {"error":{"message":"the engine died"}}\n\n',
    ]  # fmt: skip
    upstream.reply = sse_reply(frames)
    gw = await make_gateway(chat_route(upstream.url))
    resp = await gw.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert resp.status == 200
    events = responses_events(await resp.read())
    for ev in events:
        sdk_event(ev)
    last = events[-1]
    assert last["type"] == "response.failed" and last["response"]["status"] == "failed"
    assert last["response"]["error"]["code"] == "server_error" and "engine died" in last["response"]["error"]["message"]


async def test_a_passed_through_continuation_names_the_response_it_continues(upstream, make_gateway):
    """The gateway gives the backend the whole conversation instead of `previous_response_id`;
    its answer (and each event holding the response) names the previous response, as OpenAI's."""
    body = fixture("vllm_response.json")
    stream = fixture("vllm_stream.txt")
    upstream.reply = raw_reply(body)
    gw = await make_gateway(one_route("openai", "openai", upstream.url, options={"extensions": "vllm"}))
    first = jsonutil.loads(body)["id"]
    resp = await gw.post("/v1/responses", json={"model": "tiny", "input": "Hello"})
    assert resp.status == 200
    again = await gw.post("/v1/responses", json={"model": "tiny", "input": "More", "previous_response_id": first})
    got = await again.json()
    assert "previous_response_id" not in upstream.last.json
    assert got["previous_response_id"] == first
    assert {**got, "previous_response_id": None} == jsonutil.loads(body)
    upstream.reply = sse_reply([e + b"\n\n" for e in stream.split(b"\n\n")[:-1]])
    streamed = await gw.post(
        "/v1/responses", json={"model": "tiny", "input": "More", "previous_response_id": first, "stream": True}
    )
    events = responses_events(await streamed.read())
    holding = [e["response"] for e in events if "response" in e]
    assert holding and all(r["previous_response_id"] == first for r in holding)
