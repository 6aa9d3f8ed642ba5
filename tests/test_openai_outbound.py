"""OpenAI outbound codec: upstream request bodies built from the neutral form, and upstream answers
and streams parsed back, against the fixtures."""

import base64
import dataclasses
import itertools
import struct
from typing import Any

import pytest

from gateway import jsonutil
from gateway.codec.contract import BackendView, Outgoing, UpstreamCall
from gateway.dialects.openai.inbound import parse_chat
from gateway.dialects.openai.outbound import OpenAIOutbound, Options
from gateway.dialects.openai.reading import OpenAIStreamParser
from gateway.neutral.errors import Unsupported, UpstreamClass, UpstreamError
from gateway.neutral.events import expand
from gateway.neutral.params import Params
from gateway.neutral.types import Choice, EmbeddingResult, Finish, Message, Request, Result, Task, Usage
from gateway.proxy.plan import apply_policy
from tests.fixtures.openai.wire import evs, load, raw

OUT = OpenAIOutbound()


def backend(extensions: str = "none", model: str | None = "up-model") -> BackendView:
    return BackendView("b", "openai", model, Options(extensions=extensions))


def build(req: Request, b: BackendView) -> UpstreamCall:
    """The upstream call for `req`, as the proxy's plan has it built: forwarded as it is when the
    client spoke the backend's own wire."""
    variant = OUT.carriage(req, b).variant
    return OUT.build(Outgoing(req, b, "req1", OUT.carriage(req, b).wire == req.wire, variant))


def policy(req: Request, b: BackendView) -> tuple[Request, tuple[str, ...]]:
    """`req` with the parameters the fate policy leaves it for `b`, and the hints it dropped."""
    params, dropped = apply_policy(req.params, OUT.carriage(req, b).fates, b.name, "openai")
    return req.but(params=params), dropped


def body_of(req: Request, b: BackendView) -> dict[str, Any]:
    call = build(req, b)
    assert call.body is not None
    return jsonutil.loads(call.body)  # type: ignore[no-any-return]


# ---- outbound: neutral -> upstream ----------------------------------------------------------


def foreign_chat(**params: Any) -> Request:
    """A chat request as a non-OpenAI inbound dialect would hand it over."""
    return Request(
        task=Task.CHAT, wire="tgi", model="client-model", messages=[Message("user", "hi")], params=Params(**params)
    )


def test_build_public_drops_vendor_hints_and_maps_max_tokens() -> None:
    b = backend("none")
    req = foreign_chat(
        max_tokens=20, temperature=0.5, top_k=10, repetition_penalty=1.2, seed=3, stop=("x",), watermark=True
    )
    req, dropped = policy(req, b)
    assert dropped == ("repetition_penalty", "top_k", "watermark")
    call = build(req, b)
    assert call.path == "/v1/chat/completions"
    assert call.stream is False and call.passthrough is False
    assert jsonutil.loads(call.body or b"") == {
        "model": "up-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stop": ["x"],
        "seed": 3,
        "max_completion_tokens": 20,
        "temperature": 0.5,
    }


def test_build_vllm_sends_vendor_params_and_max_tokens() -> None:
    b = backend("vllm")
    req = foreign_chat(max_tokens=20, top_k=10, repetition_penalty=1.2, min_p=0.1, stop_token_ids=(7,), ignore_eos=True)
    req, dropped = policy(req, b)
    assert dropped == ()
    assert body_of(req, b) == {
        "model": "up-model",
        "messages": [{"role": "user", "content": "hi"}],
        "top_k": 10,
        "min_p": 0.1,
        "repetition_penalty": 1.2,
        "stop_token_ids": [7],
        "ignore_eos": True,
        "max_tokens": 20,
    }


def test_build_do_sample_false_means_greedy() -> None:
    b = backend("none")
    req, dropped = policy(foreign_chat(do_sample=False), b)
    assert dropped == ()
    assert body_of(req, b)["temperature"] == 0.0
    # An explicit temperature wins over do_sample.
    req, _ = policy(foreign_chat(do_sample=False, temperature=0.3), b)
    assert body_of(req, b)["temperature"] == 0.3
    req, _ = policy(foreign_chat(do_sample=True), b)
    assert "temperature" not in body_of(req, b)


def test_build_refuses_contract_params_the_public_api_lacks() -> None:
    b = backend("none")
    req = foreign_chat(stop_token_ids=(2,), include_stop_str_in_output=True, top_k=3)
    with pytest.raises(Unsupported) as ei:
        policy(req, b)
    assert ei.value.status == 400
    assert ei.value.param == "include_stop_str_in_output"
    assert ei.value.code == "unsupported_parameter"
    assert "include_stop_str_in_output, stop_token_ids" in ei.value.message
    # Asking for nothing is never refused. (A parameter set to None is "not set" in the neutral form.)
    req = foreign_chat(stop_token_ids=(), include_stop_str_in_output=False, bad_words=None)
    req, dropped = policy(req, b)
    assert dropped == ()
    assert dict(req.params.items()) == {}


def test_build_translated_stream_completion_and_logprobs() -> None:
    b = backend("none")
    req = Request(
        task=Task.COMPLETION,
        wire="tgi",
        model="c",
        prompt_ids=[1, 2],
        stream=True,
        params=Params(max_tokens=9, logprobs=True, top_logprobs=2, n=2, echo=True),
    )
    call = build(req, b)
    assert call.path == "/v1/completions" and call.stream is True
    assert jsonutil.loads(call.body or b"") == {
        "model": "up-model",
        "prompt": [1, 2],
        "n": 2,
        "echo": True,
        "max_tokens": 9,
        "logprobs": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chat = foreign_chat(logprobs=True, top_logprobs=4).but(stream=True)
    assert body_of(chat, b) == {
        "model": "up-model",
        "messages": [{"role": "user", "content": "hi"}],
        "logprobs": True,
        "top_logprobs": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_build_translated_messages_and_embeddings() -> None:
    b = backend("none", model=None)
    msgs = [
        Message("system", "s"),
        Message(
            "assistant",
            None,
            tool_calls=[{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        ),
        Message("tool", "r", tool_call_id="c", name="f"),
    ]
    req = Request(task=Task.CHAT, wire="tgi", model="client-model", messages=msgs)
    assert body_of(req, b)["messages"] == [
        {"role": "system", "content": "s"},
        {"role": "assistant", "content": None, "tool_calls": msgs[1].tool_calls},
        {"role": "tool", "content": "r", "name": "f", "tool_call_id": "c"},
    ]
    assert body_of(req, b)["model"] == "client-model"  # no backend model: the client's name goes through
    # No model anywhere (TGI's /generate names none): the field is left out, not sent as null,
    # so that vLLM serves its one model.
    assert "model" not in body_of(req.but(model=None), b)
    emb = Request(
        task=Task.EMBEDDING,
        wire="tgi",
        model="e",
        input=["a"],
        params=Params(encoding_format="base64", dimensions=8),
    )
    call = build(emb, backend())
    assert call.path == "/v1/embeddings"
    assert jsonutil.loads(call.body or b"") == {
        "model": "up-model",
        "input": ["a"],
        "encoding_format": "base64",
        "dimensions": 8,
    }


def test_build_same_dialect_forwards_raw_body() -> None:
    req = parse_chat(raw("chat_request.json"))
    call = build(req, backend("none"))
    assert call.passthrough is True and call.stream is True
    expected = load("chat_request.json")
    expected["model"] = "up-model"
    assert jsonutil.loads(call.body or b"") == expected
    req = parse_chat(b'{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}],"x_vendor":1}')
    assert jsonutil.loads(build(req, backend()).body or b"") == {
        "model": "up-model",
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
        "x_vendor": 1,
        "stream_options": {"include_usage": True},
    }


# ---- outbound: upstream -> neutral ----------------------------------------------------------


def call_for(req: Request, passthrough: bool = False) -> UpstreamCall:
    return dataclasses.replace(build(req, backend()), passthrough=passthrough)


def test_parse_chat_response_fixture() -> None:
    result = OUT.parse_result(call_for(foreign_chat()), raw("chat_response.json"), {})
    assert isinstance(result, Result)
    assert result.model == "gpt-4o-mini-2024-07-18"
    assert result.choices == [Choice(0, "Hello! How can I assist you today?", finish=Finish.EOS)]
    assert result.usage == Usage(
        19,
        10,
        {k: load("chat_response.json")["usage"][k] for k in ("prompt_tokens_details", "completion_tokens_details")},
    )


def test_parse_chat_tool_calls_fixture() -> None:
    result = OUT.parse_result(call_for(foreign_chat()), raw("chat_response_tool_calls.json"), {})
    assert isinstance(result, Result)
    calls = load("chat_response_tool_calls.json")["choices"][0]["message"]["tool_calls"]
    assert result.choices == [Choice(0, "", tool_calls=calls, finish=Finish.TOOL_CALLS)]
    assert result.usage == Usage(82, 17)


def test_parse_completion_response_fixture() -> None:
    req = Request(task=Task.COMPLETION, wire="tgi", model="c", prompt="p")
    result = OUT.parse_result(call_for(req), raw("completion_response.json"), {})
    assert isinstance(result, Result)
    assert result.choices == [
        Choice(
            0,
            "\n\nThis is indeed a test",
            finish=Finish.LENGTH,
            logprobs=[
                {
                    "token": "\n\n",
                    "logprob": -0.1,
                    "top_logprobs": [{"token": "\n\n", "logprob": -0.1}, {"token": "\n", "logprob": -2.5}],
                },
                {
                    "token": "This",
                    "logprob": -0.2,
                    "top_logprobs": [{"token": "This", "logprob": -0.2}, {"token": "It", "logprob": -1.9}],
                },
                {
                    "token": " is",
                    "logprob": -0.3,
                    "top_logprobs": [{"token": " is", "logprob": -0.3}, {"token": " was", "logprob": -1.4}],
                },
            ],
        )
    ]
    assert result.usage == Usage(5, 7)


@pytest.mark.parametrize("name", ["embedding_response.json", "embedding_response_base64.json"])
def test_parse_embedding_fixtures(name: str) -> None:
    req = Request(task=Task.EMBEDDING, wire="tgi", model="e", input=["a", "b"])
    result = OUT.parse_result(call_for(req), raw(name), {})
    assert isinstance(result, EmbeddingResult)
    vectors = [v if isinstance(v, list) else struct.unpack("<3f", base64.b64decode(v)) for v in result.data]
    assert [list(v) for v in vectors] == [[0.5, -0.25, 0.125], [1.0, 0.0, -1.5]]  # sorted by index
    assert result.usage == Usage(9, None)


def test_parse_result_error_in_200_body() -> None:
    with pytest.raises(UpstreamError) as ei:
        OUT.parse_result(call_for(foreign_chat()), raw("error_server.json"), {})
    assert ei.value.status == 502
    assert "The server had an error" in ei.value.message


def test_error_message_from_bodies() -> None:
    assert OUT.error_message(400, raw("error_invalid_request.json")) == (
        "Invalid value for 'temperature': expected a number between 0 and 2."
    )
    assert OUT.error_message(502, b"<html>Bad Gateway</html>\n") == "<html>Bad Gateway</html>"
    assert OUT.error_message(500, b"") == "(empty body)"
    assert OUT.error_message(500, b'{"error":"plain string"}') == "plain string"


def test_models_and_health_path() -> None:
    assert OUT.models_path(backend()) == "/v1/models"
    assert OUT.health_path(backend()) == "/v1/models"


EXPECTED_STREAMS: dict[str, list[tuple[Any, ...]]] = {
    "chat_stream.sse": [
        ("text", 0, "Hello", None, None),
        ("text", 0, ", w\u00f6rld \U0001f44b", None, None),
        ("text", 0, "!", None, None),
        ("finish", 0, Finish.EOS),
        (
            "usage",
            9,
            4,
            {
                "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                "completion_tokens_details": {
                    "reasoning_tokens": 0,
                    "audio_tokens": 0,
                    "accepted_prediction_tokens": 0,
                    "rejected_prediction_tokens": 0,
                },
            },
        ),
    ],
    "chat_stream_tool_calls.sse": [
        ("tool", 0, 0, "call_abc123", "get_weather", ""),
        ("tool", 0, 0, None, None, '{"ci'),
        ("tool", 0, 0, None, None, 'ty": "Paris"}'),
        ("tool", 0, 1, "call_def456", "get_time", "{}"),
        ("finish", 0, Finish.TOOL_CALLS),
    ],
    "completion_stream.sse": [
        ("text", 0, "This", None, None),
        ("text", 0, " is a test", None, None),
        ("finish", 0, Finish.LENGTH),
        ("usage", 5, 4, None),
    ],
}


def parse_stream(name: str, passthrough: bool = False, step: int | None = None) -> list[tuple[Any, ...]]:
    data = raw(name)
    p = OpenAIStreamParser(not name.startswith("completion"), passthrough)
    out = []
    step = step or len(data)
    for i in range(0, len(data), step):
        out += p.feed(data[i : i + step])
    return evs(expand(out + p.close()))


@pytest.mark.parametrize("name", sorted(EXPECTED_STREAMS))
def test_stream_parser_fixtures(name: str) -> None:
    assert parse_stream(name) == EXPECTED_STREAMS[name]
    assert parse_stream(name, step=1) == EXPECTED_STREAMS[name]


# A vLLM stream as its server writes it (compact, usage in its own chunk, no "usage":null).
VLLM_STREAM = b"".join(
    b'data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"tiny","choices":[{"index":0,'
    + delta
    + b',"logprobs":null,"finish_reason":'
    + finish
    + b"}]}\n\n"
    for delta, finish in [
        (b'"delta":{"role":"assistant","content":""}', b"null"),
        (b'"delta":{"content":"Hel"}', b"null"),
        (b'"delta":{"content":"lo \\"finish_reason\\":\\"stop\\" data: {\\n\\n"}', b"null"),
        (b'"delta":{"content":"!"}', b"null"),
        (b'"delta":{"content":""}', b'"length","stop_reason":null'),
    ]
) + (
    b'data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"tiny","choices":[],'
    b'"usage":{"prompt_tokens":3,"total_tokens":7,"completion_tokens":4}}\n\ndata: [DONE]\n\n'
)


@pytest.mark.parametrize("data", [raw("chat_stream.sse"), raw("chat_stream_tool_calls.sse"), VLLM_STREAM])
def test_stream_parser_passthrough_any_split(data: bytes) -> None:
    """However the stream is cut into reads, a pass-through client gets its bytes unchanged,
    and the parser reports the same finish and usage (leading token-only events of a read
    go out undecoded, so only their presence is reported)."""
    from gateway.dialects.openai import render, stream

    def run(cuts: list[int], include_usage: bool) -> tuple[bytes, list[tuple[Any, ...]]]:
        p = OpenAIStreamParser(True, passthrough=True)
        req = Request(
            task=Task.CHAT,
            wire="openai",
            model="m",
            messages=[Message("user", "hi")],
            stream=True,
            include_usage=include_usage,
        )
        r = stream.PassthroughStream(render.OPENAI, req)
        got, seen = r.start(), []
        bounds = [0, *cuts, len(data)]
        for a, b in itertools.pairwise(bounds):
            events = p.feed(data[a:b])
            got += r.render(events)
            seen += events
        events = p.close()
        seen += events
        got += r.render(events) + r.end()
        return got, [e for e in evs(seen) if e[0] in ("finish", "usage")]

    _, whole = run([], True)
    assert [e[0] for e in whole] == ["finish", "usage"] if b'"usage":{' in data else ["finish"]
    for cut in range(1, len(data)):
        assert run([cut], True) == (data, whole), cut
    for step in (1, 7, 300):
        assert run(list(range(step, len(data), step)), True)[0] == data
    usage_at = data.rfind(b'data: {"id"')
    if b'"usage":{' in data[usage_at:]:
        # Unasked, the client gets the chunks as the server writes them without usage: neither
        # the usage chunk nor the null usage that asking adds to every other chunk.
        unasked = data[:usage_at].replace(b',"usage":null', b"") + b"data: [DONE]\n\n"
        assert run([], False)[0] == unasked
        for step in (1, 7, 300):
            assert run(list(range(step, len(data), step)), False)[0] == unasked


def test_stream_parser_in_band_error_keeps_earlier_tokens() -> None:
    p = OpenAIStreamParser(True)
    # One read carries good chunks and then the error: the tokens still come out first.
    assert evs(p.feed(raw("chat_stream_error.sse"))) == [("text", 0, "Par", None, None)]
    with pytest.raises(UpstreamError) as ei:
        p.close()
    assert ei.value.upstream_class is UpstreamClass.MIDSTREAM
    assert "The server had an error" in ei.value.message
    p = OpenAIStreamParser(True)
    with pytest.raises(UpstreamError):
        p.feed(b'data: {"error":"boom"}\n\n')


def test_stream_parser_truncation_and_raw_text() -> None:
    frames = raw("chat_stream.sse").split(b"\n\n")
    p = OpenAIStreamParser(True)
    p.feed(b"\n\n".join(frames[:3]) + b"\n\n")  # no finish, no [DONE]
    with pytest.raises(UpstreamError) as ei:
        p.close()
    assert ei.value.upstream_class is UpstreamClass.MIDSTREAM
    # A finish without [DONE] is a complete answer.
    p = OpenAIStreamParser(True)
    p.feed(b"\n\n".join(frames[:5]) + b"\n\n")
    assert p.close() == []
    # Raw text in the stream (a server error page) is an error, not silently skipped; as the
    # stream's first line it says the answer is no event stream, and its words are for the log.
    p = OpenAIStreamParser(True)
    with pytest.raises(UpstreamError) as ei:
        p.feed(b"Internal Server Error\n")
    assert ei.value.message == "backend answered with something other than an event stream"
    assert "Internal Server Error" in ei.value.detail


def test_passthrough_read_of_the_role_chunk_is_no_token() -> None:
    """A pass-through read forwarded undecoded still tells the metrics whether a token came: the
    chunk that opens a chat stream (role, empty content) is not one, the next chunk is."""
    events = [e + b"\n\n" for e in VLLM_STREAM.split(b"\n\n") if e]
    p = OpenAIStreamParser(True, passthrough=True)
    assert [type(e).__name__ for e in p.feed(events[0])] == ["Frame"]
    assert [type(e).__name__ for e in p.feed(events[1])] == ["Frame", "TextDelta"]
    assert [type(e).__name__ for e in p.feed(events[0] + events[1])] == ["Frame", "TextDelta"]


async def test_a_forwarded_body_loses_what_the_public_api_lacks_and_says_so(upstream, make_gateway):
    """The public API refuses a field it does not know: a vLLM-style hint is taken out of the
    forwarded body (and named), everything else goes as sent, the model renamed."""
    from tests.conftest import one_route
    from tests.fixtures.openai.wire import raw
    from tests.support import raw_reply

    upstream.reply = raw_reply(raw("chat_response.json"))
    gw = await make_gateway(one_route("openai", "openai", upstream.url, model="gpt-x"))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_k": 3, "min_p": 0.1, "vendor": 1}
    resp = await gw.post("/v1/chat/completions", json=body)
    assert resp.status == 200
    assert resp.headers["X-Gateway-Dropped-Params"] == "min_p,top_k"
    assert upstream.last.json == {"model": "gpt-x", "messages": body["messages"], "vendor": 1}
    refused = await gw.post("/v1/chat/completions", json={**body, "stop_token_ids": [2]})
    assert refused.status == 400 and "stop_token_ids" in (await refused.json())["error"]["message"]
