"""Triton codecs against the generate endpoint's documented payloads and the backends' own
(tests/fixtures/triton): parsing, rendering, bodies."""

from pathlib import Path
from typing import Any

import pytest

from gateway import jsonutil
from gateway.codec.contract import BackendView, Outgoing, PathValues, RenderContext, UpstreamCall
from gateway.dialects import registry as dialects
from gateway.dialects.triton import inbound, render
from gateway.dialects.triton.outbound import TritonOutbound
from gateway.neutral.errors import InvalidRequest, Unsupported, UpstreamError
from gateway.neutral.events import FinishEvent, TextDelta, UsageEvent, expand
from gateway.neutral.params import Params
from gateway.neutral.types import Choice, Finish, Request, Result, Task

FIX = Path(__file__).parent / "fixtures" / "triton"


def fixture(name: str) -> Any:
    return jsonutil.loads((FIX / name).read_bytes())


def raw(name: str) -> bytes:
    return (FIX / name).read_bytes()


def path_values(model: str = "mymodel", version: str | None = None) -> PathValues:
    """What the router reads from /v2/models/{model}[/versions/{version}]/generate[_stream]."""
    return {"model": model, **({"version": version} if version else {})}


def parse_generate(body: bytes, path: PathValues) -> Request:
    return inbound.GENERATE.parse(body, path)


def parse_generate_stream(body: bytes, path: PathValues) -> Request:
    return inbound.GENERATE_STREAM.parse(body, path)


def backend(flavor: str, **options: Any) -> BackendView:
    d = dialects.get("triton")
    opts = d.outbound.options_model.model_validate({"flavor": flavor, **options})
    return BackendView("b", "triton", "ensemble", opts)


CTX = RenderContext(request_id="rid", created=1, model="ensemble")


# ---- inbound ---------------------------------------------------------------------------------


def test_a_generate_request_parses_to_a_completion():
    req = parse_generate(raw("generate_request.json"), path_values())
    assert req.task is Task.COMPLETION
    assert req.model == "mymodel"
    assert req.prompt == "client input"
    assert req.stream is False
    assert dict(req.params.items()) == {"temperature": 0}
    assert req.path_params == {}


def test_top_level_extras_are_parameters_and_names_map():
    body = {
        "text_input": "hi",
        "max_tokens": 20,
        "bad_words": "",
        "stop_words": ["\n\n", "###"],
        "parameters": {"random_seed": 7, "runtime_top_k": 5, "top_p": 0.9, "stream": True, "unknown_knob": "x"},
        "repetition_penalty": 1.1,
        "beam_width": 1,
    }
    req = parse_generate_stream(jsonutil.dumps(body), path_values(version="2"))
    assert req.stream is True
    assert dict(req.params.items()) == {
        "max_tokens": 20,
        "seed": 7,
        "top_k": 5,
        "top_p": 0.9,
        "repetition_penalty": 1.1,
        "stop": ("\n\n", "###"),
    }
    assert req.path_params == {"version": "2"}


def test_vllm_and_mindie_names():
    body = {"text_input": "hi", "parameters": {"stop": "END", "seed": 3, "max_new_tokens": 9, "min_p": 0.1}}
    req = parse_generate(jsonutil.dumps(body), path_values())
    assert dict(req.params.items()) == {"stop": ("END",), "seed": 3, "max_tokens": 9, "min_p": 0.1}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{bad", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b"{}", "missing required input 'text_input'"),
        (b'{"text_input": 5}', "'text_input' must be a string"),
        (b'{"text_input": "a", "id": 5}', "'id' must be a string"),
        (b'{"text_input": "a", "parameters": []}', "'parameters' must be a JSON object"),
        (b'{"text_input": "a", "parameters": {"x": [1]}}', "parameter 'x' has invalid type"),
        (b'{"text_input": "a", "y": {"a": 1}}', "parameter 'y' has invalid type"),
        (b'{"text_input": "a", "stop_words": [1]}', "parameter 'stop_words' has invalid type"),
        (b'{"text_input": "a", "max_tokens": "16"}', "max_tokens"),
        (b'{"text_input": "a", "max_tokens": 0}', "max_tokens"),
        (b'{"text_input": "a", "temperature": true}', "temperature"),
        (b'{"text_input": "a", "num_return_sequences": 2}', "num_return_sequences"),
    ],
)
def test_bad_inputs_are_invalid_requests(body: bytes, message: str):
    with pytest.raises(InvalidRequest) as e:
        parse_generate(body, path_values())
    assert message in e.value.message


def test_error_response_shape_and_statuses():
    ib = dialects.get("triton").inbound
    resp = ib.error_reply(InvalidRequest("error message"))
    assert resp.status == 400 and resp.body == jsonutil.dumps(fixture("error.json"))
    assert resp.content_type == "application/json"
    assert ib.error_reply(UpstreamError("boom")).status == 500
    assert ib.error_reply(Unsupported("no")).status == 400


# ---- rendering -------------------------------------------------------------------------------


def test_a_rendered_answer_is_the_documented_generate_response():
    req = parse_generate(raw("generate_request.json"), path_values())
    out = render.render_result(Result([Choice(0, "model output", finish=Finish.EOS)]), req, CTX)
    assert jsonutil.loads(out) == fixture("generate_response.json")
    assert out == b'{"id":"42","model_name":"mymodel","model_version":"1","text_output":"model output"}'


def test_render_without_id_and_with_version():
    req = parse_generate(b'{"text_input": "x"}', path_values(version="3"))
    out = render.render_result(Result([Choice(0, "y")]), req, CTX)
    assert out == b'{"model_name":"mymodel","model_version":"3","text_output":"y"}'


def test_stream_renderer_frames():
    req = parse_generate_stream(b'{"id": "7", "text_input": "x"}', path_values())
    r = render.stream_renderer(req, CTX)
    assert r.content_type == "text/event-stream; charset=utf-8"
    assert r.start() == b""
    out = r.render([TextDelta("Hel"), TextDelta("lo \u00e9"), FinishEvent(Finish.EOS)])
    assert out == (
        b'data: {"id":"7","model_name":"mymodel","model_version":"1","text_output":"Hel"}\n\n'
        b'data: {"id":"7","model_name":"mymodel","model_version":"1","text_output":"lo \xc3\xa9"}\n\n'
    )
    assert r.end() == b""
    assert r.error(UpstreamError("gone")) == b'data: {"error":"gone"}\n\n'


def test_stream_renderer_answers_once_even_without_text():
    req = parse_generate_stream(b'{"text_input": "x"}', path_values())
    r = render.stream_renderer(req, CTX)
    assert r.render([FinishEvent(Finish.EOS)]) == b""
    assert r.end() == b'data: {"model_name":"mymodel","model_version":"1","text_output":""}\n\n'


# ---- outbound bodies -------------------------------------------------------------------------


def neutral(stream: bool = False, **params: Any) -> Request:
    """A completion request from an OpenAI client; list parameters become the neutral tuples."""
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
    return Request(task=Task.COMPLETION, wire="openai", model="m", prompt="Hi", stream=stream, params=Params(**values))


def build(ob: TritonOutbound, req: Request, b: BackendView, request_id: str = "r1") -> UpstreamCall:
    """The call for a request translated from another dialect (not forwarded as it came)."""
    return ob.build(Outgoing(req, b, request_id, same_wire=False))


def test_trtllm_body():
    ob = TritonOutbound()
    b = backend("trtllm")
    req = neutral(stream=True, max_tokens=20, temperature=0.0, top_p=0.9, seed=5, stop=["\n"], presence_penalty=0.5)
    call = build(ob, req, b)
    assert call.path == "/v2/models/ensemble/generate_stream"
    assert call.stream is True
    assert jsonutil.loads(call.body) == {
        "id": "r1",
        "text_input": "Hi",
        "max_tokens": 20,
        "bad_words": "",
        "stop_words": ["\n"],
        "exclude_input_in_output": True,
        "temperature": 0.0,
        "top_p": 0.9,
        "presence_penalty": 0.5,
        "top_k": 1,
        "random_seed": 5,
        "return_log_probs": True,
        "stream": True,
    }


def test_trtllm_body_defaults_max_tokens_and_version():
    call = build(
        TritonOutbound(), neutral(), backend("trtllm", default_max_tokens=64, model_version="2", count_tokens=False)
    )
    assert call.path == "/v2/models/ensemble/versions/2/generate"
    assert jsonutil.loads(call.body) == {
        "id": "r1",
        "text_input": "Hi",
        "max_tokens": 64,
        "bad_words": "",
        "stop_words": "",
        "exclude_input_in_output": True,
    }


def test_vllm_body_has_sampling_parameters_as_a_json_string():
    req = neutral(max_tokens=8, temperature=0.7, top_k=40, stop=["\n\n", "###"], seed=3, frequency_penalty=0.2)
    call = build(TritonOutbound(), req, backend("vllm"))
    assert call.path == "/v2/models/ensemble/generate"
    body = jsonutil.loads(call.body)
    assert body == {
        "id": "r1",
        "text_input": "Hi",
        "sampling_parameters": '{"max_tokens":8,"temperature":0.7,"top_k":40,"frequency_penalty":0.2,'
        '"stop":["\\n\\n","###"],"seed":3}',
        "exclude_input_in_output": True,
        "return_finish_reason": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }
    assert jsonutil.loads(body["sampling_parameters"])["stop"] == ["\n\n", "###"]


def test_mindie_body_greedy_and_ranges():
    req = neutral(stream=True, max_tokens=10, temperature=0.0, top_p=1.0, seed=1, repetition_penalty=1.1)
    call = build(TritonOutbound(), req, backend("mindie"))
    assert call.path == "/v2/models/ensemble/generate_stream"
    assert jsonutil.loads(call.body) == {
        "id": "r1",
        "text_input": "Hi",
        "parameters": {"details": True, "max_new_tokens": 10, "do_sample": False, "seed": 1, "repetition_penalty": 1.1},
    }


def test_mindie_body_sampling_and_id_rules():
    req = neutral(temperature=0.8, top_p=0.95, top_k=10)
    body = jsonutil.loads(build(TritonOutbound(), req, backend("mindie"), request_id="not a valid id!").body)
    assert body == {
        "text_input": "Hi",
        "parameters": {
            "details": True,
            "max_new_tokens": 512,
            "temperature": 0.8,
            "top_p": 0.95,
            "top_k": 10,
            "do_sample": True,
        },
    }


def test_fates_per_flavor():
    ob = TritonOutbound()
    assert ob.carriage(neutral(), backend("trtllm")).fates["stop"] == "map"
    assert ob.carriage(neutral(), backend("vllm")).fates["stop"] == "map"
    assert ob.carriage(neutral(), backend("mindie")).fates["stop"] == "emulate"
    for flavor in ("trtllm", "vllm", "mindie"):
        f = ob.carriage(neutral(), backend(flavor)).fates
        assert not {"tools", "logprobs"} & set(f)
        # Structured output as guided decoding (TRT-LLM) or the sampling parameters (vLLM).
        assert f.get("response_format") == ("map" if flavor != "mindie" else None)
        assert f["n"] == "emulate"  # one generate call per choice (core.fanout)


def test_unsupported_inputs():
    ob = TritonOutbound()
    ids = Request(task=Task.COMPLETION, wire="openai", prompt_ids=[1, 2])
    with pytest.raises(Unsupported):
        build(ob, ids, backend("trtllm"))
    with pytest.raises(Unsupported):
        build(ob, Request(task=Task.EMBEDDING, wire="openai", input=["a"]), backend("trtllm"))
    with pytest.raises(Unsupported, match="tokenizer"):
        build(ob, Request(task=Task.CHAT, wire="openai", messages=[]), backend("trtllm"))
    with pytest.raises(InvalidRequest, match="seed"):
        build(ob, neutral(seed=-1), backend("mindie"))


def test_options_are_strict():
    d = dialects.get("triton")
    with pytest.raises(ValueError, match="extra"):
        d.outbound.options_model.model_validate({"flavour": "trtllm"})
    with pytest.raises(ValueError):
        d.outbound.options_model.model_validate({"flavor": "tensorrt"})
    assert d.outbound.options_model().model_dump()["flavor"] == "trtllm"


# ---- outbound responses ----------------------------------------------------------------------


def test_trtllm_result_counts_log_probs():
    ob = TritonOutbound()
    call = build(ob, neutral(max_tokens=4), backend("trtllm"))
    res = ob.parse_result(call, raw("trtllm_response.json"), {})
    assert isinstance(res, Result)
    assert res.choices[0].text == " Machine learning is a"
    assert res.choices[0].finish is Finish.LENGTH
    assert res.usage is not None and (res.usage.prompt_tokens, res.usage.completion_tokens) == (None, 4)
    call = build(ob, neutral(max_tokens=20), backend("trtllm"))
    assert ob.parse_result(call, raw("trtllm_response.json"), {}).choices[0].finish is Finish.EOS


def test_trtllm_without_counts_leaves_usage_out():
    ob = TritonOutbound()
    call = build(ob, neutral(max_tokens=4), backend("trtllm", count_tokens=False))
    res = ob.parse_result(call, b'{"model_name":"ensemble","model_version":"1","text_output":"abc"}', {})
    assert isinstance(res, Result)
    assert res.usage is None and res.choices[0].finish is Finish.EOS


def test_trtllm_stop_word_is_removed():
    ob = TritonOutbound()
    call = build(ob, neutral(stop=[" is"]), backend("trtllm"))
    res = ob.parse_result(call, raw("trtllm_response.json"), {})
    assert isinstance(res, Result)
    assert res.choices[0].text == " Machine learning"
    assert res.choices[0].finish is Finish.STOP_STRING
    call = build(ob, neutral(stop=[" is"], include_stop_str_in_output=True), backend("trtllm"))
    assert ob.parse_result(call, raw("trtllm_response.json"), {}).choices[0].text == " Machine learning is a"


def test_vllm_result():
    ob = TritonOutbound()
    res = ob.parse_result(build(ob, neutral(), backend("vllm")), raw("vllm_response.json"), {})
    assert isinstance(res, Result)
    assert res.choices[0].text == "\n\nTriton Inference Server is"
    assert res.choices[0].finish is Finish.LENGTH
    assert res.usage is not None and (res.usage.prompt_tokens, res.usage.completion_tokens) == (7, 5)


def test_mindie_result():
    ob = TritonOutbound()
    res = ob.parse_result(build(ob, neutral(), backend("mindie")), raw("mindie_response.json"), {})
    assert isinstance(res, Result)
    assert res.choices[0].text == " Olivier and I am a"
    assert res.choices[0].finish is Finish.EOS
    assert res.usage is not None and (res.usage.prompt_tokens, res.usage.completion_tokens) == (None, 21)


def test_error_in_a_200_body_is_an_upstream_error():
    ob = TritonOutbound()
    call = build(ob, neutral(), backend("trtllm"))
    body = b'{"error": "generate expects model to produce exactly 1 response, use generate stream"}'
    with pytest.raises(UpstreamError, match="exactly 1 response"):
        ob.parse_result(call, body, {})


def test_error_message_reads_triton_and_mindie_bodies():
    ob = TritonOutbound()
    assert ob.error_message(400, raw("error.json")) == "error message"
    assert ob.error_message(422, b'{"error":"bad id","error_type":"Input Validation Error"}') == (
        "bad id (Input Validation Error)"
    )
    assert ob.error_message(500, b"oops") == "oops"


# ---- streams ---------------------------------------------------------------------------------


def run_stream(flavor: str, data: bytes, split: int | None = None, **params: Any) -> list[Any]:
    ob = TritonOutbound()
    parser = ob.stream_parser(build(ob, neutral(stream=True, **params), backend(flavor)))
    parts = [data] if split is None else [data[:split], data[split:]]
    events: list[Any] = []
    for p in parts:
        events += parser.feed(p)
    return expand(events + parser.close())  # a run of texts as its deltas


def summary(events: list[Any]) -> tuple[str, list[Any], list[Any]]:
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    finishes = [e.reason for e in events if isinstance(e, FinishEvent)]
    usages = [(e.usage.prompt_tokens, e.usage.completion_tokens) for e in events if isinstance(e, UsageEvent)]
    return text, finishes, usages


@pytest.mark.parametrize(
    ("flavor", "name", "params", "expected"),
    [
        ("trtllm", "trtllm_stream.txt", {"max_tokens": 4}, (" Machine learning is a", [Finish.LENGTH], [(None, 4)])),
        ("trtllm", "trtllm_stream.txt", {"max_tokens": 9}, (" Machine learning is a", [Finish.EOS], [(None, 4)])),
        ("trtllm", "trtllm_stream.txt", {"stop": [" is"]}, (" Machine learning", [Finish.STOP_STRING], [(None, 4)])),
        ("vllm", "vllm_stream.txt", {}, ("\n\nTriton Inference Server is", [Finish.EOS], [(7, 5)])),
        ("mindie", "mindie_stream.txt", {}, (" Olivier and I", [Finish.LENGTH], [(None, 3)])),
    ],
)
def test_stream_fixtures_at_every_split(flavor: str, name: str, params: dict[str, Any], expected: Any):
    data = raw(name)
    for split in range(len(data) + 1):
        assert summary(run_stream(flavor, data, split, **params)) == expected


def test_midstream_error_event_raises():
    with pytest.raises(UpstreamError, match="out of memory") as e:
        run_stream("trtllm", raw("midstream_error_stream.txt"))
    assert e.value.upstream_class == "midstream"


def test_mindie_raw_text_timeout_raises():
    with pytest.raises(UpstreamError, match="Engine callback timeout"):
        run_stream("mindie", raw("mindie_timeout_stream.txt"))


def test_mindie_stream_without_final_event_is_truncated():
    data = raw("mindie_stream.txt")
    cut = data[: data.rindex(b"data:")]
    with pytest.raises(UpstreamError, match="truncated"):
        run_stream("mindie", cut)


def test_vllm_stream_without_finish_is_truncated():
    data = raw("vllm_stream.txt")
    with pytest.raises(UpstreamError, match="truncated"):
        run_stream("vllm", data[: data.rindex(b"data:")])


def test_mindie_stop_sequence_without_text_is_an_error():
    data = b'data:{"text_output":"","details":{"finish_reason":"stop_sequence","generated_tokens":0}}\n\n'
    with pytest.raises(UpstreamError):
        run_stream("mindie", data)
