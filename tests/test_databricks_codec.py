"""Databricks codecs both ways, against fixtures built from seed 002's field tables."""

from pathlib import Path
from typing import Any

import pytest

from gateway import jsonutil
from gateway.codec.contract import BackendView, NoOptions, Outgoing, RenderContext, UpstreamCall
from gateway.dialects.databricks import inbound, render
from gateway.dialects.databricks.outbound import DatabricksOutbound
from gateway.dialects.databricks.reading import error_text
from gateway.neutral.errors import InvalidRequest, Kind, NotFound, Unsupported, UpstreamClass, UpstreamError
from gateway.neutral.events import FinishEvent, TextDelta, ToolCallDelta, UsageEvent
from gateway.neutral.params import Params
from gateway.neutral.types import Choice, EmbeddingResult, Finish, Message, Request, Result, Task, Usage

FIX = Path(__file__).parent / "fixtures" / "databricks"
CTX = RenderContext(request_id="r1", created=1700000000, model="my-endpoint")


def fixture(name: str) -> Any:
    return jsonutil.loads((FIX / name).read_bytes())


def raw(name: str) -> bytes:
    return (FIX / name).read_bytes()


# ---- inbound parsing -----------------------------------------------------------------------


def test_chat_request_fixture_parses_every_field():
    req = inbound.parse_invocation(raw("chat_request.json"))
    assert req.task is Task.CHAT and req.wire == "databricks" and req.stream is False
    body = fixture("chat_request.json")
    assert dict(req.params.items()) == {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 40,
        "max_tokens": 128,
        "n": 2,
        "stop": ("\n\n",),
        "tools": tuple(body["tools"]),
        "tool_choice": "auto",
        "response_format": body["response_format"],
        "top_logprobs": 2,
        "logprobs": True,
    }
    assert [m.role for m in req.messages or ()] == ["system", "user", "assistant", "tool"]
    assert req.messages is not None and req.messages[2].tool_calls == body["messages"][2]["tool_calls"]
    assert req.messages[3].tool_call_id == "call_1"


def test_completion_batch_fixture_parses():
    req = inbound.parse_invocation(raw("completion_request.json"))
    assert req.task is Task.COMPLETION
    assert req.prompt == ["Die Hauptstadt von Frankreich ist", "Die Hauptstadt von Italien ist"]
    # Defaults ("error", "", false, n=1) ask for nothing and stay out of the neutral params.
    assert dict(req.params.items()) == {"temperature": 0.5, "top_p": 1.0, "top_k": 1, "max_tokens": 16, "stop": (".",)}


def test_completion_options_reach_params():
    body = {"prompt": "x", "echo": True, "suffix": "!", "error_behavior": "truncate", "n": 3}
    req = inbound.parse_invocation(jsonutil.dumps(body))
    assert dict(req.params.items()) == {"echo": True, "suffix": "!", "error_behavior": "truncate", "n": 3}
    assert req.prompt == "x"


def test_embedding_fixture_parses():
    req = inbound.parse_invocation(raw("embedding_request.json"))
    assert req.task is Task.EMBEDDING
    assert req.input == ["Wie ist das Wetter?", "Es regnet."]
    assert dict(req.params.items()) == {"instruction": "Represent this sentence for searching relevant passages:"}
    assert inbound.parse_invocation(b'{"input": "eins"}').input == ["eins"]


BAD = [
    ({}, "needs messages"),
    ({"dataframe_split": {"columns": []}}, "custom MLflow"),
    ({"messages": [{"role": "user", "content": "a"}], "prompt": "b"}, "exactly one"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "developer", "content": "a"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]}, "system"),
    ({"messages": [{"role": "user", "content": "a", "tool_call_id": "x"}]}, "tool_call_id"),
    ({"messages": [{"role": "tool", "content": "a"}]}, "tool_call_id"),
    ({"messages": [{"role": "user"}]}, "content"),
    ({"messages": [{"role": "user", "content": "a"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "a"}], "temperature": 2.5}, "temperature"),
    ({"messages": [{"role": "user", "content": "a"}], "top_p": 1.1}, "top_p"),
    ({"messages": [{"role": "user", "content": "a"}], "top_k": 0}, "top_k"),
    ({"messages": [{"role": "user", "content": "a"}], "n": 0}, "n"),
    ({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 3}, "requires logprobs"),
    ({"messages": [{"role": "user", "content": "a"}], "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "a"}], "tool_choice": "required"}, "requires tools"),
    ({"messages": [{"role": "user", "content": "a"}], "response_format": {"type": "json_schema"}}, "json_schema"),
    ({"messages": [{"role": "user", "content": "a"}], "response_format": {"type": "yaml"}}, "response_format"),
    (
        {
            "messages": [{"role": "user", "content": "a"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x"}},
        },
        "schema",
    ),
    (
        {
            "messages": [{"role": "user", "content": "a"}],
            "tools": [{"type": "function", "function": {"name": "f", "description": "d"}}] * 33,
        },
        "tools",
    ),
    (
        {
            "messages": [{"role": "user", "content": "a"}],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "f",
                        "description": "d",
                        "parameters": {"type": "object", "properties": {f"p{i}": {} for i in range(16)}},
                    },
                }
            ],
        },
        "15 properties",
    ),
    (
        {"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function", "function": {"name": "f"}}]},
        "description",
    ),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, 2]}, "prompt"),
    ({"prompt": "a", "error_behavior": "ignore"}, "error_behavior"),
    ({"prompt": "a", "echo": "yes"}, "echo"),
    ({"prompt": "a", "use_raw_prompt": 1}, "use_raw_prompt"),
    ({"input": []}, "input"),
    ({"input": "a", "instruction": 5}, "instruction"),
]


@pytest.mark.parametrize(("body", "needle"), BAD)
def test_bad_bodies_are_validation_errors(body, needle):
    with pytest.raises(InvalidRequest) as e:
        inbound.parse_invocation(jsonutil.dumps(body))
    assert needle in e.value.message
    assert render.error_status_code(e.value) == (400, "INVALID_PARAMETER_VALUE")


def test_openai_form_requires_model():
    with pytest.raises(InvalidRequest, match="model"):
        inbound.CHAT.parse(b'{"messages": [{"role": "user", "content": "a"}]}', {})
    req = inbound.CHAT.parse(b'{"model": "ep", "messages": [{"role": "user", "content": "a"}]}', {})
    assert req.model == "ep"


@pytest.mark.parametrize(
    ("err", "status", "code"),
    [
        (InvalidRequest("x"), 400, "INVALID_PARAMETER_VALUE"),
        (Unsupported("x"), 400, "INVALID_PARAMETER_VALUE"),
        (NotFound("x"), 404, "RESOURCE_DOES_NOT_EXIST"),
        (UpstreamError("x", status=429, kind=Kind.RATE_LIMIT), 429, "REQUEST_LIMIT_EXCEEDED"),
        (UpstreamError("x", status=504, kind=Kind.TIMEOUT), 504, "DEADLINE_EXCEEDED"),
        (UpstreamError("x", status=503, kind=Kind.UNAVAILABLE), 503, "TEMPORARILY_UNAVAILABLE"),
        (UpstreamError("x", upstream_class=UpstreamClass.CONNECT), 503, "TEMPORARILY_UNAVAILABLE"),
        (UpstreamError("x"), 500, "INTERNAL_ERROR"),
    ],
)
def test_error_reply_codes(err, status, code):
    resp = inbound.DatabricksInbound().error_reply(err)
    assert resp.status == status
    assert resp.body is not None and jsonutil.loads(resp.body) == {"error_code": code, "message": "x"}


# ---- rendering -----------------------------------------------------------------------------


def _req(task: Task, **kw: Any) -> Request:
    return Request(task=task, wire="databricks", **kw)


def test_render_chat_exact():
    result = Result(
        [
            Choice(0, "Hallo", finish=Finish.EOS),
            Choice(
                1,
                "",
                tool_calls=[{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                finish=Finish.TOOL_CALLS,
            ),
        ],
        Usage(5, 2),
    )
    assert jsonutil.loads(render.render_result(result, _req(Task.CHAT), CTX)) == {
        "id": "chatcmpl_r1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "my-endpoint",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hallo"}, "finish_reason": "stop"},
            {
                "index": 1,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
                "finish_reason": "tool_calls",
            },
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def test_render_completion_exact():
    result = Result(
        [Choice(0, " Paris", finish=Finish.STOP_STRING), Choice(1, " Rom", finish=Finish.LENGTH)], Usage(14, 4)
    )
    assert jsonutil.loads(render.render_result(result, _req(Task.COMPLETION), CTX)) == {
        "id": "cmpl_r1",
        "object": "text_completion",
        "created": 1700000000,
        "choices": [
            {"index": 0, "text": " Paris", "finish_reason": "stop"},
            {"index": 1, "text": " Rom", "finish_reason": "length"},
        ],
        "usage": {"prompt_tokens": 14, "completion_tokens": 4, "total_tokens": 18},
    }


def test_render_embedding_exact():
    result = EmbeddingResult([[0.5, -0.5], [1.0, 0.0]], Usage(3, 0))
    assert jsonutil.loads(render.render_result(result, _req(Task.EMBEDDING), CTX)) == {
        "id": "emb_r1",
        "object": "list",
        "model": "my-endpoint",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, -0.5]},
            {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]},
        ],
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }


HEAD = (
    b'data: {"id":"chatcmpl_r1","object":"chat.completion.chunk","created":1700000000,"model":"my-endpoint","choices":['
)


def test_chat_stream_frames_exact():
    r = render.stream_renderer(_req(Task.CHAT, stream=True), CTX)
    out = r.start() + r.render([TextDelta("Hi"), ToolCallDelta(0, "c1", "f", "", 0)])
    out += r.render([FinishEvent(Finish.EOS), UsageEvent(Usage(1, 1))]) + r.end()
    assert out == (
        HEAD
        + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
        + HEAD
        + b'{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}\n\n'
        + HEAD
        + b'{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":'
        b'{"name":"f","arguments":""}}]},"logprobs":null,"finish_reason":null}]}\n\n'
        + HEAD
        + b'{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}\n\n'
        + b"data: [DONE]\n\n"
    )


def test_completion_stream_frames_and_error_exact():
    r = render.stream_renderer(_req(Task.COMPLETION, stream=True), CTX)
    head = b'data: {"id":"cmpl_r1","object":"text_completion","created":1700000000,"model":"my-endpoint","choices":['
    out = r.start() + r.render([TextDelta(" Paris", 1)]) + r.error(UpstreamError("boom")) + r.end()
    assert out == (
        head + b'{"index":1,"text":" Paris","logprobs":null,"finish_reason":null}]}\n\n'
        b'data: {"error_code":"INTERNAL_ERROR","message":"boom","error":{"error_code":"INTERNAL_ERROR",'
        b'"message":"boom"}}\n\n'
        b"data: [DONE]\n\n"
    )


# ---- outbound ------------------------------------------------------------------------------


def _backend(model: str | None = "llama-ep") -> BackendView:
    return BackendView("dbx", "databricks", model, NoOptions())


OUT = DatabricksOutbound()


def _build(req: Request, backend: BackendView) -> UpstreamCall:
    """The upstream call for `req`, forwarded as it is only when the client spoke Databricks."""
    variant = OUT.carriage(req, backend).variant
    return OUT.build(Outgoing(req, backend, "r1", OUT.carriage(req, backend).wire == req.wire, variant))


def _openai_chat() -> Request:
    return Request(
        task=Task.CHAT,
        wire="openai",
        model="gpt",
        messages=[
            Message("developer", "Be brief."),
            Message("user", [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]),
            Message(
                "assistant",
                None,
                tool_calls=[{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            ),
            Message("tool", "42", tool_call_id="c", name="f"),
        ],
        params=Params(max_tokens=10, temperature=0.2, stop=("x",), logprobs=True, top_logprobs=1),
    )


def test_build_chat_exact():
    call = _build(_openai_chat(), _backend())
    assert call.path == "/serving-endpoints/llama-ep/invocations" and not call.passthrough
    assert jsonutil.loads(call.body or b"") == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            # Text parts are joined by the neutral rule every text backend sees (Message.text()).
            {"role": "user", "content": "Hi \nthere"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "content": "42", "tool_call_id": "c"},
        ],
        "max_tokens": 10,
        "temperature": 0.2,
        "stop": ["x"],
        "logprobs": True,
        "top_logprobs": 1,
        "stream": False,
    }


def test_build_refuses_token_ids_and_needs_a_name():
    with pytest.raises(Unsupported, match="token ids"):
        _build(Request(task=Task.COMPLETION, wire="openai", prompt_ids=[1, 2]), _backend())
    with pytest.raises(Unsupported, match="endpoint name"):
        _build(Request(task=Task.COMPLETION, wire="openai", prompt="a"), _backend(None))


def test_fates_per_task():
    assert "echo" not in OUT.carriage(_req(Task.CHAT), _backend()).fates
    assert "logprobs" not in OUT.carriage(_req(Task.COMPLETION), _backend()).fates
    assert "instruction" in OUT.carriage(_req(Task.EMBEDDING), _backend()).fates


def _call(task: Task, stream: bool = False) -> UpstreamCall:
    return UpstreamCall("/x", b"{}", stream, state=Request(task=task, wire="openai"))


def test_parse_chat_and_tool_responses():
    r = OUT.parse_result(_call(Task.CHAT), raw("chat_response.json"), {})
    assert isinstance(r, Result)
    assert (r.choices[0].text, r.choices[0].finish) == ("It is 21 degrees in Berlin.", Finish.EOS)
    assert (r.usage and (r.usage.prompt_tokens, r.usage.completion_tokens)) == (57, 9)
    t = OUT.parse_result(_call(Task.CHAT), raw("chat_tool_response.json"), {})
    assert isinstance(t, Result) and t.choices[0].finish is Finish.TOOL_CALLS
    assert t.choices[0].tool_calls == fixture("chat_tool_response.json")["choices"][0]["message"]["tool_calls"]


def test_parse_completion_and_embedding_responses():
    r = OUT.parse_result(_call(Task.COMPLETION), raw("completion_response.json"), {})
    assert isinstance(r, Result) and [(c.index, c.text) for c in r.choices] == [(0, " Paris"), (1, " Rom")]
    e = OUT.parse_result(_call(Task.EMBEDDING), raw("embedding_response.json"), {})
    assert isinstance(e, EmbeddingResult) and e.data[1] == [-0.0321, 0.0654, -0.0987]
    assert e.usage is not None and e.usage.prompt_tokens == 9


def _events(parser: Any, data: bytes, step: int) -> list[Any]:
    out = []
    for i in range(0, len(data), step):
        out += parser.feed(data[i : i + step])
    return out + parser.close()


@pytest.mark.parametrize("step", [1, 7, 10_000])
def test_stream_without_done_is_complete_after_finish(step):
    events = _events(OUT.stream_parser(_call(Task.CHAT, True)), raw("chat_stream.txt"), step)
    assert [repr(e) for e in events if not isinstance(e, UsageEvent)] == [
        "TextDelta(text='Hallo', index=0, logprobs=None, token_ids=None)",
        "TextDelta(text=' Welt', index=0, logprobs=None, token_ids=None)",
        "TextDelta(text='!', index=0, logprobs=None, token_ids=None)",
        "FinishEvent(reason=<Finish.EOS: 'eos'>, index=0, stop=None)",
    ]
    assert [(e.usage.prompt_tokens, e.usage.completion_tokens) for e in events if isinstance(e, UsageEvent)] == [
        (12, 3)
    ]


def test_completion_stream_with_done():
    events = _events(OUT.stream_parser(_call(Task.COMPLETION, True)), raw("completion_stream.txt"), 5)
    assert [repr(e) for e in events] == [
        "TextDelta(text=' Paris', index=0, logprobs=None, token_ids=None)",
        "FinishEvent(reason=<Finish.LENGTH: 'length'>, index=0, stop=None)",
    ]


def test_truncated_stream_and_inband_error_are_midstream_errors():
    first = raw("chat_stream.txt").split(b"\n\n")[0] + b"\n\n"
    p = OUT.stream_parser(_call(Task.CHAT, True))
    p.feed(first)
    with pytest.raises(UpstreamError) as e:
        p.close()
    assert e.value.upstream_class is UpstreamClass.MIDSTREAM
    p = OUT.stream_parser(_call(Task.CHAT, True))
    with pytest.raises(UpstreamError, match="REQUEST_LIMIT_EXCEEDED: Exceeded"):
        p.feed(b"data: " + jsonutil.dumps(fixture("error_rate_limit.json")) + b"\n\n")


def test_error_text_variants():
    assert error_text(raw("error_bad_param.json")) == "INVALID_PARAMETER_VALUE: temperature must be in [0, 2]"
    assert error_text(b'{"error_code": 1001, "message": "legacy"}') == "1001: legacy"
    assert error_text(b'{"error": "plain"}') == "plain"
    assert error_text(b"<html>Bad Gateway</html>") == "<html>Bad Gateway</html>"


def test_health():
    assert OUT.health_path(_backend()) == "/api/2.0/serving-endpoints/llama-ep"
    assert OUT.health_ok(raw("endpoint_ready.json")) is True
    assert OUT.health_ok(raw("endpoint_not_ready.json")) is False
