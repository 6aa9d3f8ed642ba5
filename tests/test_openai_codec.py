"""The OpenAI codecs both ways, against the wire fixtures in tests/fixtures/openai/.

Inbound: client wire -> neutral Request; neutral Result/events -> client wire (exact JSON, exact
SSE frames). Outbound: neutral Request -> upstream body (public API and vLLM-style servers);
upstream responses and streams -> neutral results and events.
"""

import base64
import struct
from typing import Any

import pytest

from gateway import jsonutil
from gateway.config import Backend as BackendConf
from gateway.core.errors import InvalidRequest, NotFound, Unsupported, UpstreamClass, UpstreamError
from gateway.core.params import apply_policy
from gateway.core.routing import Backend
from gateway.core.types import (
    Choice,
    EmbeddingResult,
    Finish,
    FinishEvent,
    Frame,
    Message,
    ReasoningDelta,
    Request,
    Result,
    Task,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageEvent,
)
from gateway.dialects import openai as openai_dialect
from gateway.dialects.base import RenderContext
from gateway.dialects.openai import render
from gateway.dialects.openai.inbound import OpenAIInbound, parse_chat, parse_completion, parse_embedding
from gateway.dialects.openai.outbound import OpenAIOutbound, OpenAIStreamParser, Options
from tests.fixtures.openai.wire import evs, load, raw

OUT = OpenAIOutbound()
CTX = RenderContext(request_id="req1", created=1700000000, model="m")


def backend(extensions: str = "none", model: str | None = "up-model") -> Backend:
    conf = BackendConf(dialect="openai", url="http://x", model=model, options={"extensions": extensions})
    return Backend("b", conf, openai_dialect.DIALECT, Options(extensions=extensions), ["http://x"], {})


def body_of(req: Request, b: Backend) -> dict[str, Any]:
    call = OUT.build(req, b)
    assert call.body is not None
    return jsonutil.loads(call.body)  # type: ignore[no-any-return]


# ---- inbound: wire -> neutral ---------------------------------------------------------------


def test_parse_chat_fixture() -> None:
    req = parse_chat(raw("chat_request.json"))
    assert req.task is Task.CHAT
    assert req.inbound == "openai"
    assert req.model == "gpt-4o-mini"
    assert req.stream is True
    assert req.include_usage is True
    assert req.raw == load("chat_request.json")
    assert req.params == {
        "frequency_penalty": -0.25,
        "logit_bias": {"50256": -100},
        "presence_penalty": 0.5,
        "seed": 42,
        "temperature": 0.7,
        "top_p": 0.9,
        "user": "user-1234",
        "n": 2,
        "stop": ["\n\n", "END"],
        "max_tokens": 256,
        "tools": load("chat_request.json")["tools"],
        "tool_choice": "auto",
        "response_format": {"type": "json_object"},
        "parallel_tool_calls": False,
        "top_logprobs": 3,
        "logprobs": True,
    }
    assert req.messages == [
        Message("system", "You are a weather assistant."),
        Message(
            "user",
            [
                {"type": "text", "text": "What is the weather in Paris?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/paris.png", "detail": "low"}},
            ],
        ),
        Message(
            "assistant",
            None,
            tool_calls=[
                {
                    "id": "call_abc123",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        ),
        Message("tool", '{"temp_c": 18}', tool_call_id="call_abc123"),
        Message("user", "And in Berlin?", name="alice"),
    ]
    assert req.messages[1].text() == "What is the weather in Paris?"


def test_parse_chat_max_tokens_and_vendor_extensions() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "stop": "x",
        "n": 1,
        "top_k": 40,
        "repetition_penalty": 1.1,
        "min_p": 0.05,
        "ignore_eos": True,
        "stop_token_ids": [2],
    }
    req = parse_chat(jsonutil.dumps(body))
    assert req.params == {
        "max_tokens": 5,
        "stop": ["x"],
        "top_k": 40,
        "repetition_penalty": 1.1,
        "min_p": 0.05,
        "ignore_eos": True,
        "stop_token_ids": [2],
    }
    assert req.stream is False and req.include_usage is False


def test_parse_completion_fixture() -> None:
    req = parse_completion(raw("completion_request.json"))
    assert req.task is Task.COMPLETION
    assert req.prompt == "Say this is a test"
    assert req.prompt_ids is None
    assert req.params == {
        "presence_penalty": 0.1,
        "temperature": 0,
        "top_p": 1,
        "user": "u-9",
        "max_tokens": 7,
        "stop": ["\n"],
        "logprobs": True,
        "top_logprobs": 2,
    }


def test_parse_completion_token_ids_and_default_max_tokens() -> None:
    req = parse_completion(b'{"model":"m","prompt":[1,2,3]}')
    assert req.prompt_ids == [1, 2, 3] and req.prompt is None
    assert req.params == {"max_tokens": 16}
    req = parse_completion(b'{"model":"m","prompt":[[1],[2,3]],"best_of":3,"echo":true,"suffix":"z"}')
    assert req.prompt_ids == [[1], [2, 3]]
    assert req.params == {"max_tokens": 16, "best_of": 3, "echo": True, "suffix": "z"}


def test_parse_embedding_fixture() -> None:
    req = parse_embedding(raw("embedding_request.json"))
    assert req.task is Task.EMBEDDING
    assert req.input == ["The food was delicious", "and the waiter was kind"]
    assert req.params == {"dimensions": 3, "user": "u-7"}
    req = parse_embedding(b'{"model":"e","input":"one","encoding_format":"base64"}')
    assert req.input == ["one"]
    assert req.params == {"encoding_format": "base64"}
    assert parse_embedding(b'{"model":"e","input":[5,6]}').input == [[5, 6]]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":2.5}', "temperature"),
        (b'{"model":"m","messages":[{"role":"robot","content":"x"}]}', "messages.0.role"),
        (b'{"model":"m","messages":[{"role":"tool","content":"x"}]}', "messages.0"),
        (b'{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"auto"}', None),
    ],
)
def test_parse_chat_rejects(body: bytes, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as ei:
        parse_chat(body)
    assert ei.value.status == 400
    assert ei.value.param == param


# ---- inbound: neutral -> wire ---------------------------------------------------------------


def chat_req(**kw: Any) -> Request:
    return Request(Task.CHAT, "openai", model="m", messages=[Message("user", "hi")], **kw)


def test_render_chat_exact() -> None:
    result = Result(
        [Choice(0, "Hello!", finish=Finish.STOP_STRING)],
        Usage(3, 2, {"prompt_tokens_details": {"cached_tokens": 1}}),
    )
    assert jsonutil.loads(render.render_chat(result, chat_req(), CTX)) == {
        "id": "chatcmpl-req1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello!"},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "total_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 1},
        },
    }


def test_render_chat_tool_calls_and_unknown_usage() -> None:
    calls = load("chat_response_tool_calls.json")["choices"][0]["message"]["tool_calls"]
    result = Result([Choice(0, "", tool_calls=calls, finish=Finish.TOOL_CALLS)], Usage(5, None))
    out = jsonutil.loads(render.render_chat(result, chat_req(), CTX))
    assert out["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": None, "tool_calls": calls},
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ]
    assert "usage" not in out  # an unknown count is never invented


def test_render_completion_exact_with_logprobs() -> None:
    entries = [
        {"token": "Hi", "logprob": -0.5, "top_logprobs": [{"token": "Hi", "logprob": -0.5}]},
        {"token": " there", "logprob": -1.0, "top_logprobs": []},
    ]
    result = Result([Choice(0, "Hi there", finish=Finish.LENGTH, logprobs=entries)], Usage(4, 2))
    req = Request(Task.COMPLETION, "openai", model="m", prompt="p")
    assert jsonutil.loads(render.render_completion(result, req, CTX)) == {
        "id": "cmpl-req1",
        "object": "text_completion",
        "created": 1700000000,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "text": "Hi there",
                "logprobs": {
                    "tokens": ["Hi", " there"],
                    "token_logprobs": [-0.5, -1.0],
                    "top_logprobs": [{"Hi": -0.5}, {}],
                    "text_offset": [0, 2],
                },
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
    }


def b64(vec: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()


def test_render_embedding_float_and_base64() -> None:
    vecs = [[0.5, -0.25], [1.0, 2.0]]
    result = EmbeddingResult([vecs[0], b64(vecs[1])], Usage(7, 0))
    req = Request(Task.EMBEDDING, "openai", model="e", input=["a", "b"])
    assert jsonutil.loads(render.render_embedding(result, req, CTX)) == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, -0.25]},
            {"object": "embedding", "index": 1, "embedding": [1.0, 2.0]},
        ],
        "model": "m",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    req.params["encoding_format"] = "base64"
    out = jsonutil.loads(render.render_embedding(result, req, CTX))
    assert [d["embedding"] for d in out["data"]] == [b64(vecs[0]), b64(vecs[1])]


HEAD = b'data: {"id":"chatcmpl-req1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":['


def test_chat_stream_renderer_exact_frames() -> None:
    r = render.ChatStreamRenderer(chat_req(stream=True), CTX)
    assert r.content_type == "text/event-stream"
    assert (
        r.start()
        == HEAD + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
    )
    out = r.render(
        [
            TextDelta('H\u00e9llo "q"\n'),
            ReasoningDelta("think"),
            ToolCallDelta(0, "call_1", "f", ""),
            ToolCallDelta(0, None, None, '{"a":1}'),
            FinishEvent(Finish.TOOL_CALLS),
            UsageEvent(Usage(1, 2)),
        ]
    )
    assert out == (
        HEAD
        + '{"index":0,"delta":{"content":"H\u00e9llo \\"q\\"\\n"},"logprobs":null,"finish_reason":null}]}\n\n'.encode()
        + HEAD
        + b'{"index":0,"delta":{"reasoning_content":"think"},"logprobs":null,"finish_reason":null}]}\n\n'
        + HEAD
        + b'{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function",'
        b'"function":{"name":"f","arguments":""}}]},"logprobs":null,"finish_reason":null}]}\n\n'
        + HEAD
        + b'{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"a\\":1}"}}]},'
        b'"logprobs":null,"finish_reason":null}]}\n\n'
        + HEAD
        + b'{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}\n\n'
    )
    # Usage was not asked for: not rendered.
    assert r.end() == b"data: [DONE]\n\n"


def test_chat_stream_renderer_include_usage_and_n() -> None:
    r = render.ChatStreamRenderer(chat_req(stream=True, include_usage=True, params={"n": 2}), CTX)
    role = b'{"index":%d,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}'
    assert r.start() == b"".join(HEAD + role % i + b'],"usage":null}\n\n' for i in (0, 1))
    assert r.render([TextDelta("a", 1), FinishEvent(Finish.EOS, 1), UsageEvent(Usage(3, 4))]) == (
        HEAD
        + b'{"index":1,"delta":{"content":"a"},"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        + HEAD
        + b'{"index":1,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}\n\n'
    )
    assert r.end() == (
        HEAD + b'],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}\n\n' + b"data: [DONE]\n\n"
    )


def test_chat_stream_renderer_error_frame() -> None:
    r = render.ChatStreamRenderer(chat_req(stream=True), CTX)
    err = UpstreamError("backend broke off", upstream_class=UpstreamClass.MIDSTREAM)
    assert r.error(err) + r.end() == (
        b'data: {"error":{"message":"backend broke off","type":"server_error","param":null,"code":null}}\n\n'
        b"data: [DONE]\n\n"
    )


def test_completion_stream_renderer_exact_frames() -> None:
    req = Request(Task.COMPLETION, "openai", model="m", prompt="p", stream=True, include_usage=True)
    r = render.CompletionStreamRenderer(req, CTX)
    head = b'data: {"id":"cmpl-req1","object":"text_completion","created":1700000000,"model":"m","choices":['
    assert r.start() == b""
    assert r.render([TextDelta("x"), FinishEvent(Finish.LENGTH), UsageEvent(Usage(1, 1))]) == (
        head
        + b'{"index":0,"text":"x","logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        + head
        + b'{"index":0,"text":"","logprobs":null,"finish_reason":"length"}],"usage":null}\n\n'
    )
    assert r.end() == head + b'],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}\n\n' + (
        b"data: [DONE]\n\n"
    )


def test_passthrough_renderer_withholds_unasked_usage() -> None:
    frames = [Frame(b'{"a":1}'), Frame(b'{"choices":[],"usage":{}}', usage_only=True), TextDelta("ignored")]
    quiet = render.PassthroughStreamRenderer(chat_req(stream=True), CTX)
    assert quiet.start() + quiet.render(frames) + quiet.end() == b'data: {"a":1}\n\ndata: [DONE]\n\n'
    loud = render.PassthroughStreamRenderer(chat_req(stream=True, include_usage=True), CTX)
    assert loud.render(frames) == b'data: {"a":1}\n\ndata: {"choices":[],"usage":{}}\n\n'


def test_error_response_shape() -> None:
    resp = OpenAIInbound().error_response(NotFound("no such model", param="model", code="model_not_found"))
    assert resp.status == 404
    assert resp.content_type == "application/json"
    assert resp.body is not None
    assert jsonutil.loads(resp.body) == {  # type: ignore[arg-type]
        "error": {
            "message": "no such model",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


# ---- outbound: neutral -> upstream ----------------------------------------------------------


def foreign_chat(**params: Any) -> Request:
    """A chat request as a non-OpenAI inbound dialect would hand it over."""
    return Request(Task.CHAT, "tgi", model="client-model", messages=[Message("user", "hi")], params=params)


def test_build_public_drops_vendor_hints_and_maps_max_tokens() -> None:
    b = backend("none")
    req = foreign_chat(
        max_tokens=20, temperature=0.5, top_k=10, repetition_penalty=1.2, seed=3, stop=["x"], watermark=True
    )
    dropped = apply_policy(req, OUT.fates(b, req), b.name, "openai")
    assert dropped == ["repetition_penalty", "top_k", "watermark"]
    call = OUT.build(req, b)
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
    req = foreign_chat(max_tokens=20, top_k=10, repetition_penalty=1.2, min_p=0.1, stop_token_ids=[7], ignore_eos=True)
    assert apply_policy(req, OUT.fates(b, req), b.name, "openai") == []
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
    req = foreign_chat(do_sample=False)
    assert apply_policy(req, OUT.fates(b, req), b.name, "openai") == []
    assert body_of(req, b)["temperature"] == 0.0
    # An explicit temperature wins over do_sample.
    req = foreign_chat(do_sample=False, temperature=0.3)
    apply_policy(req, OUT.fates(b, req), b.name, "openai")
    assert body_of(req, b)["temperature"] == 0.3
    req = foreign_chat(do_sample=True)
    apply_policy(req, OUT.fates(b, req), b.name, "openai")
    assert "temperature" not in body_of(req, b)


def test_build_refuses_contract_params_the_public_api_lacks() -> None:
    b = backend("none")
    req = foreign_chat(stop_token_ids=[2], include_stop_str_in_output=True, top_k=3)
    with pytest.raises(Unsupported) as ei:
        apply_policy(req, OUT.fates(b, req), b.name, "openai")
    assert ei.value.status == 400
    assert ei.value.param == "include_stop_str_in_output"
    assert ei.value.code == "unsupported_parameter"
    assert "include_stop_str_in_output, stop_token_ids" in ei.value.message
    # Asking for nothing is never refused.
    req = foreign_chat(stop_token_ids=[], include_stop_str_in_output=False, details=None)
    assert apply_policy(req, OUT.fates(b, req), b.name, "openai") == []
    assert req.params == {}


def test_build_translated_stream_completion_and_logprobs() -> None:
    b = backend("none")
    req = Request(
        Task.COMPLETION,
        "tgi",
        model="c",
        prompt_ids=[1, 2],
        stream=True,
        params={"max_tokens": 9, "logprobs": True, "top_logprobs": 2, "n": 2, "echo": True},
    )
    call = OUT.build(req, b)
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
    chat = foreign_chat(logprobs=True, top_logprobs=4)
    chat.stream = True
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
    req = Request(Task.CHAT, "tgi", model="client-model", messages=msgs)
    assert body_of(req, b)["messages"] == [
        {"role": "system", "content": "s"},
        {"role": "assistant", "content": None, "tool_calls": msgs[1].tool_calls},
        {"role": "tool", "content": "r", "name": "f", "tool_call_id": "c"},
    ]
    assert body_of(req, b)["model"] == "client-model"  # no backend model: the client's name goes through
    emb = Request(Task.EMBEDDING, "tgi", model="e", input=["a"], params={"encoding_format": "base64", "dimensions": 8})
    call = OUT.build(emb, backend())
    assert call.path == "/v1/embeddings"
    assert jsonutil.loads(call.body or b"") == {
        "model": "up-model",
        "input": ["a"],
        "encoding_format": "base64",
        "dimensions": 8,
    }


def test_build_same_dialect_forwards_raw_body() -> None:
    req = parse_chat(raw("chat_request.json"))
    call = OUT.build(req, backend("none"))
    assert call.passthrough is True and call.stream is True
    expected = load("chat_request.json")
    expected["model"] = "up-model"
    assert jsonutil.loads(call.body or b"") == expected
    req = parse_chat(b'{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}],"x_vendor":1}')
    assert jsonutil.loads(OUT.build(req, backend()).body or b"") == {
        "model": "up-model",
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
        "x_vendor": 1,
        "stream_options": {"include_usage": True},
    }


# ---- outbound: upstream -> neutral ----------------------------------------------------------


def call_for(req: Request, passthrough: bool = False) -> Any:
    call = OUT.build(req, backend())
    call.passthrough = passthrough
    return call


def test_parse_chat_response_fixture() -> None:
    result = OUT.parse_result(call_for(foreign_chat()), raw("chat_response.json"))
    assert isinstance(result, Result)
    assert result.model == "gpt-4o-mini-2024-07-18"
    assert result.choices == [Choice(0, "Hello! How can I assist you today?", finish=Finish.EOS)]
    assert result.usage == Usage(
        19,
        10,
        {k: load("chat_response.json")["usage"][k] for k in ("prompt_tokens_details", "completion_tokens_details")},
    )


def test_parse_chat_tool_calls_fixture() -> None:
    result = OUT.parse_result(call_for(foreign_chat()), raw("chat_response_tool_calls.json"))
    assert isinstance(result, Result)
    calls = load("chat_response_tool_calls.json")["choices"][0]["message"]["tool_calls"]
    assert result.choices == [Choice(0, "", tool_calls=calls, finish=Finish.TOOL_CALLS)]
    assert result.usage == Usage(82, 17)


def test_parse_completion_response_fixture() -> None:
    req = Request(Task.COMPLETION, "tgi", model="c", prompt="p")
    result = OUT.parse_result(call_for(req), raw("completion_response.json"))
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
    req = Request(Task.EMBEDDING, "tgi", model="e", input=["a", "b"])
    result = OUT.parse_result(call_for(req), raw(name))
    assert isinstance(result, EmbeddingResult)
    vectors = [v if isinstance(v, list) else struct.unpack("<3f", base64.b64decode(v)) for v in result.data]
    assert [list(v) for v in vectors] == [[0.5, -0.25, 0.125], [1.0, 0.0, -1.5]]  # sorted by index
    assert result.usage == Usage(9, None)


def test_parse_result_error_in_200_body() -> None:
    with pytest.raises(UpstreamError) as ei:
        OUT.parse_result(call_for(foreign_chat()), raw("error_server.json"))
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
    assert OUT.models(raw("models_response.json")) == ["gpt-4o-mini", "text-embedding-3-small"]
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
    return evs(out + p.close())


@pytest.mark.parametrize("name", sorted(EXPECTED_STREAMS))
def test_stream_parser_fixtures(name: str) -> None:
    assert parse_stream(name) == EXPECTED_STREAMS[name]
    assert parse_stream(name, step=1) == EXPECTED_STREAMS[name]


def test_stream_parser_passthrough_frames() -> None:
    got = parse_stream("chat_stream.sse", passthrough=True)
    payloads = [line[len(b"data: ") :] for line in raw("chat_stream.sse").split(b"\n\n") if line]
    frames = [e for e in got if e[0] == "frame"]
    assert frames == [("frame", p, False) for p in payloads[:5]] + [("frame", payloads[5], True)]
    assert [e for e in got if e[0] != "frame"] == EXPECTED_STREAMS["chat_stream.sse"]


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
    # Raw text in the stream (a server error page) is an error, not silently skipped.
    p = OpenAIStreamParser(True)
    with pytest.raises(UpstreamError) as ei:
        p.feed(b"Internal Server Error\n")
    assert "Internal Server Error" in ei.value.message
