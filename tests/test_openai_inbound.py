"""OpenAI inbound codec: client requests to the neutral form, and answers and streams rendered back."""

import base64
import struct
from typing import Any

import pytest

from gateway import jsonutil
from gateway.codec.contract import RenderContext
from gateway.dialects.openai import render, stream
from gateway.dialects.openai.inbound import OpenAIInbound, parse_chat, parse_completion, parse_embedding
from gateway.neutral.errors import InvalidRequest, NotFound, UpstreamClass, UpstreamError
from gateway.neutral.events import FinishEvent, Frame, ReasoningDelta, TextDelta, ToolCallDelta, UsageEvent
from gateway.neutral.params import Params
from gateway.neutral.types import Choice, EmbeddingResult, Finish, Message, Request, Result, Task, Usage
from tests.fixtures.openai.wire import load, raw

CTX = RenderContext(request_id="req1", created=1700000000, model="m")


# ---- inbound: wire -> neutral ---------------------------------------------------------------


def test_parse_chat_fixture() -> None:
    req = parse_chat(raw("chat_request.json"))
    assert req.task is Task.CHAT
    assert req.wire == "openai.chat"
    assert req.model == "gpt-4o-mini"
    assert req.stream is True
    assert req.include_usage is True
    assert req.raw == load("chat_request.json")
    assert dict(req.params.items()) == {
        "frequency_penalty": -0.25,
        "logit_bias": {"50256": -100},
        "presence_penalty": 0.5,
        "seed": 42,
        "temperature": 0.7,
        "top_p": 0.9,
        "user": "user-1234",
        "n": 2,
        "stop": ("\n\n", "END"),
        "max_tokens": 256,
        "tools": tuple(load("chat_request.json")["tools"]),
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
        "stop_token_ids": (2,),
    }
    req = parse_chat(jsonutil.dumps(body))
    assert dict(req.params.items()) == {
        "max_tokens": 5,
        "stop": ("x",),
        "top_k": 40,
        "repetition_penalty": 1.1,
        "min_p": 0.05,
        "ignore_eos": True,
        "stop_token_ids": (2,),
    }
    assert req.stream is False and req.include_usage is False


def test_parse_completion_fixture() -> None:
    req = parse_completion(raw("completion_request.json"))
    assert req.task is Task.COMPLETION
    assert req.prompt == "Say this is a test"
    assert req.prompt_ids is None
    assert dict(req.params.items()) == {
        "presence_penalty": 0.1,
        "temperature": 0,
        "top_p": 1,
        "user": "u-9",
        "max_tokens": 7,
        "stop": ("\n",),
        "logprobs": True,
        "top_logprobs": 2,
    }


def test_parse_completion_token_ids_and_default_max_tokens() -> None:
    req = parse_completion(b'{"model":"m","prompt":[1,2,3]}')
    assert req.prompt_ids == [1, 2, 3] and req.prompt is None
    assert dict(req.params.items()) == {"max_tokens": 16}
    req = parse_completion(b'{"model":"m","prompt":[[1],[2,3]],"best_of":3,"echo":true,"suffix":"z"}')
    assert req.prompt_ids == [[1], [2, 3]]
    assert dict(req.params.items()) == {"max_tokens": 16, "best_of": 3, "echo": True, "suffix": "z"}


def test_parse_embedding_fixture() -> None:
    req = parse_embedding(raw("embedding_request.json"))
    assert req.task is Task.EMBEDDING
    assert req.input == ["The food was delicious", "and the waiter was kind"]
    assert dict(req.params.items()) == {"dimensions": 3, "user": "u-7"}
    req = parse_embedding(b'{"model":"e","input":"one","encoding_format":"base64"}')
    assert req.input == ["one"]
    assert dict(req.params.items()) == {"encoding_format": "base64"}
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
    return Request(task=Task.CHAT, wire="openai", model="m", messages=[Message("user", "hi")], **kw)


def test_render_chat_exact() -> None:
    result = Result(
        [Choice(0, "Hello!", finish=Finish.STOP_STRING)],
        Usage(3, 2, {"prompt_tokens_details": {"cached_tokens": 1}}),
    )
    assert jsonutil.loads(render.render_chat(render.OPENAI, result, CTX)) == {
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
    out = jsonutil.loads(render.render_chat(render.OPENAI, result, CTX))
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
    assert jsonutil.loads(render.render_completion(render.OPENAI, result, CTX)) == {
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
    req = Request(task=Task.EMBEDDING, wire="openai", model="e", input=["a", "b"])
    assert jsonutil.loads(render.render_embedding(result, req, CTX)) == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, -0.25]},
            {"object": "embedding", "index": 1, "embedding": [1.0, 2.0]},
        ],
        "model": "m",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    req = req.but(params=req.params.replace(encoding_format="base64"))
    out = jsonutil.loads(render.render_embedding(result, req, CTX))
    assert [d["embedding"] for d in out["data"]] == [b64(vecs[0]), b64(vecs[1])]


HEAD = b'data: {"id":"chatcmpl-req1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":['


def test_chat_stream_renderer_exact_frames() -> None:
    r = stream.ChunkStream(render.OPENAI, chat_req(stream=True), CTX)
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
    r = stream.ChunkStream(render.OPENAI, chat_req(stream=True, include_usage=True, params=Params(n=2)), CTX)
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
    r = stream.ChunkStream(render.OPENAI, chat_req(stream=True), CTX)
    err = UpstreamError("backend broke off", upstream_class=UpstreamClass.MIDSTREAM)
    assert r.error(err) + r.end() == (
        b'data: {"error":{"message":"backend broke off","type":"server_error","param":null,"code":null}}\n\n'
        b"data: [DONE]\n\n"
    )


def test_completion_stream_renderer_exact_frames() -> None:
    req = Request(task=Task.COMPLETION, wire="openai", model="m", prompt="p", stream=True, include_usage=True)
    r = stream.ChunkStream(render.OPENAI, req, CTX)
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
    usage = b'data: {"choices":[],"usage":{}}\n\n'
    frames = [Frame(b'data: {"a":1}\n\n'), Frame(usage, usage_only=True), TextDelta("ignored")]
    quiet = stream.PassthroughStream(render.OPENAI, chat_req(stream=True))
    assert quiet.start() + quiet.render(frames) + quiet.end() == b'data: {"a":1}\n\ndata: [DONE]\n\n'
    loud = stream.PassthroughStream(render.OPENAI, chat_req(stream=True, include_usage=True))
    assert loud.render(frames) == b'data: {"a":1}\n\ndata: {"choices":[],"usage":{}}\n\n'


def test_error_reply_shape() -> None:
    resp = OpenAIInbound().error_reply(NotFound("no such model", param="model", code="model_not_found"))
    assert resp.status == 404
    assert resp.content_type == "application/json"
    assert resp.body is not None
    assert jsonutil.loads(resp.body) == {
        "error": {
            "message": "no such model",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
