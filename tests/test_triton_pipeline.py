"""Triton through a running gateway: both directions, every flavour, streams, faults, health."""

from pathlib import Path
from typing import Any

from aiohttp import web

from gateway import jsonutil
from tests.conftest import one_route
from tests.support import FakeUpstream, Recorded, json_reply, raw_reply, sse_json, sse_reply
from tests.tokenizer_kit import build_tokenizer_folder

FIX = Path(__file__).parent / "fixtures" / "triton"
RID = {"X-Request-Id": "req1"}


def raw(name: str) -> bytes:
    return (FIX / name).read_bytes()


def frames(name: str) -> list[bytes]:
    """A fixture stream split into its events, each written as its own chunk."""
    return [p + b"\n\n" for p in raw(name).split(b"\n\n") if p]


def triton_route(url: str, flavor: str, **backend: Any) -> dict[str, Any]:
    return one_route("openai", "triton", url, model="ensemble", options={"flavor": flavor}, **backend)


COMPLETION = {
    "id": "cmpl-x",
    "object": "text_completion",
    "created": 1,
    "model": "gpt",
    "choices": [{"index": 0, "text": "model output", "logprobs": None, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4},
}


# ---- triton clients -> openai backend --------------------------------------------------------


async def test_triton_to_openai(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = json_reply(COMPLETION)
    gw = await make_gateway(one_route("triton", "openai", upstream.url, model="gpt"))
    resp = await gw.post("/v2/models/mymodel/generate", data=raw("generate_request.json"))
    assert resp.status == 200
    assert await resp.read() == b'{"id":"42","model_name":"mymodel","model_version":"1","text_output":"model output"}'
    assert upstream.last.path == "/v1/completions"
    assert upstream.last.json == {"model": "gpt", "prompt": "client input", "temperature": 0}


async def test_triton_to_openai_stream(upstream: FakeUpstream, make_gateway: Any):
    chunk = {"id": "c", "object": "text_completion", "created": 1, "model": "gpt"}
    upstream.reply = sse_reply(
        [
            b"data: " + jsonutil.dumps({**chunk, "choices": [{"index": 0, "text": "Hel", "finish_reason": None}]}),
            b"\n\n",
            b"data: " + jsonutil.dumps({**chunk, "choices": [{"index": 0, "text": "lo", "finish_reason": "length"}]}),
            b"\n\ndata: [DONE]\n\n",
        ]
    )
    gw = await make_gateway(one_route("triton", "openai", upstream.url, model="gpt"))
    body = {"text_input": "hi", "parameters": {"max_tokens": 2, "stop_words": ["x", "y"], "stream": True}}
    resp = await gw.post("/v2/models/m/versions/4/generate_stream", json=body)
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert await resp.read() == (
        b'data: {"model_name":"m","model_version":"4","text_output":"Hel"}\n\n'
        b'data: {"model_name":"m","model_version":"4","text_output":"lo"}\n\n'
    )
    assert upstream.last.json == {
        "model": "gpt",
        "prompt": "hi",
        "stop": ["x", "y"],
        "max_tokens": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_triton_client_gets_triton_errors(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = json_reply({"error": {"message": "overloaded", "type": "server_error"}}, status=503)
    config = one_route("triton", "openai", upstream.url, model="gpt")
    config["routes"][0]["models"] = ["mymodel"]
    gw = await make_gateway(config)
    resp = await gw.post("/v2/models/mymodel/generate", json={"text_input": "a"})
    assert resp.status == 503
    assert (await resp.json())["error"].endswith("overloaded")
    resp = await gw.post("/v2/models/other/generate", json={"text_input": "a"})
    assert resp.status == 404
    assert "other" in (await resp.json())["error"]
    for bad in (b"{nope", b'{"parameters": {}}', b'{"text_input": 1}', b'{"text_input": "a", "k": [1, 2]}'):
        resp = await gw.post("/v2/models/mymodel/generate_stream", data=bad)
        assert resp.status == 400
        assert resp.content_type == "application/json"
        assert set(await resp.json()) == {"error"}
    resp = await gw.post("/v2/models/mymodel/generate", json={"text_input": "a", "parameters": {"x": {"a": 1}}})
    assert await resp.json() == {
        "error": "parameter 'x' has invalid type. It should be either 'int', 'bool', 'float' or 'string'."
    }
    resp = await gw.post("/v2/models/mymodel/generate", json={"text_input": "a", "logprobs": True})
    # Unknown names are ignored, as Triton models do: the request reaches the backend without them.
    assert resp.status == 503
    assert upstream.last.json == {"model": "gpt", "prompt": "a"}


async def test_triton_stream_error_after_start(upstream: FakeUpstream, make_gateway: Any):
    chunk = {"id": "c", "object": "text_completion", "created": 1, "model": "gpt"}
    upstream.reply = sse_reply(
        [
            b"data: " + jsonutil.dumps({**chunk, "choices": [{"index": 0, "text": "A", "finish_reason": None}]}),
            b"\n\n",
            b'data: {"error": {"message": "engine died", "type": "server_error"}}\n\n',
        ]
    )
    gw = await make_gateway(one_route("triton", "openai", upstream.url, model="gpt"))
    resp = await gw.post("/v2/models/m/generate_stream", json={"id": "z", "text_input": "hi"})
    assert resp.status == 200
    events = sse_json(await resp.read())
    assert events[0] == {"id": "z", "model_name": "m", "model_version": "1", "text_output": "A"}
    assert list(events[1]) == ["error"] and "engine died" in events[1]["error"]
    assert len(events) == 2


# ---- openai clients -> triton backend, each flavour -----------------------------------------


async def test_openai_completion_to_trtllm(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = raw_reply(raw("trtllm_response.json"))
    gw = await make_gateway(triton_route(upstream.url, "trtllm"))
    resp = await gw.post(
        "/v1/completions", json={"model": "m", "prompt": "What is ML?", "max_tokens": 4, "seed": 3}, headers=RID
    )
    assert resp.status == 200
    body = await resp.json()
    assert body["choices"] == [
        {"index": 0, "text": " Machine learning is a", "logprobs": None, "finish_reason": "length"}
    ]
    assert "usage" not in body  # prompt tokens unknown without a tokenizer: not invented
    assert upstream.last.path == "/v2/models/ensemble/generate"
    assert upstream.last.json == {
        "id": "req1",
        "text_input": "What is ML?",
        "max_tokens": 4,
        "bad_words": "",
        "stop_words": "",
        "exclude_input_in_output": True,
        "random_seed": 3,
        "return_log_probs": True,
    }


async def test_openai_completion_stream_to_trtllm_with_stop(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = sse_reply(frames("trtllm_stream.txt"))
    gw = await make_gateway(triton_route(upstream.url, "trtllm"))
    resp = await gw.post(
        "/v1/completions",
        json={"model": "m", "prompt": "p", "stream": True, "stop": " is", "max_tokens": 10},
        headers=RID,
    )
    events = sse_json(await resp.read())
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == " Machine learning"
    assert [e["choices"][0]["finish_reason"] for e in events[:-1]][-1] == "stop"
    assert upstream.last.path == "/v2/models/ensemble/generate_stream"
    sent = upstream.last.json
    assert sent["stream"] is True and sent["stop_words"] == [" is"] and sent["max_tokens"] == 10


async def test_openai_completion_to_vllm(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = raw_reply(raw("vllm_response.json"))
    gw = await make_gateway(triton_route(upstream.url, "vllm"))
    resp = await gw.post(
        "/v1/completions",
        json={"model": "m", "prompt": "Q", "max_tokens": 5, "stop": ["\n\n"], "top_k": 3, "user": "u"},
        headers=RID,
    )
    body = await resp.json()
    assert resp.headers["X-Gateway-Dropped-Params"] == "user"
    assert body["choices"][0]["text"] == "\n\nTriton Inference Server is"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    assert upstream.last.json == {
        "id": "req1",
        "text_input": "Q",
        "sampling_parameters": '{"max_tokens":5,"top_k":3,"stop":["\\n\\n"]}',
        "exclude_input_in_output": True,
        "return_finish_reason": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }


async def test_openai_completion_stream_to_vllm(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = sse_reply(frames("vllm_stream.txt"))
    gw = await make_gateway(triton_route(upstream.url, "vllm"))
    resp = await gw.post(
        "/v1/completions",
        json={"model": "m", "prompt": "Q", "stream": True, "stream_options": {"include_usage": True}},
    )
    events = sse_json(await resp.read())
    assert events[-1] == "[DONE]"
    assert events[-2]["usage"] == {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    texts = [e["choices"][0]["text"] for e in events[:-2]]
    assert texts == ["\n\nTriton", " Inference", " Server is", ""]
    assert events[-3]["choices"][0]["finish_reason"] == "stop"
    sent = upstream.last.json
    assert sent["stream"] is True
    assert jsonutil.loads(sent["sampling_parameters"]) == {"max_tokens": 16}


async def test_openai_to_mindie_stream_framing_without_space(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = sse_reply(frames("mindie_stream.txt"))
    gw = await make_gateway(triton_route(upstream.url, "mindie"))
    resp = await gw.post(
        "/v1/completions", json={"model": "m", "prompt": "My name is", "stream": True, "temperature": 0}, headers=RID
    )
    events = sse_json(await resp.read())
    assert [e["choices"][0]["text"] for e in events[:-1]] == [" Olivier", " and", " I", ""]
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert upstream.last.json == {
        "id": "req1",
        "text_input": "My name is",
        "parameters": {"details": True, "max_new_tokens": 16, "do_sample": False},
    }


async def test_openai_to_mindie_non_stream(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = raw_reply(raw("mindie_response.json"))
    gw = await make_gateway(triton_route(upstream.url, "mindie"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "My name is", "top_p": 1.0})
    body = await resp.json()
    assert body["choices"][0]["text"] == " Olivier and I am a"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert upstream.last.json["parameters"] == {"details": True, "max_new_tokens": 16}


async def test_mindie_truncated_stream_gives_openai_error(upstream: FakeUpstream, make_gateway: Any):
    data = raw("mindie_stream.txt")
    upstream.reply = sse_reply([data[: data.rindex(b"data:")]])
    gw = await make_gateway(triton_route(upstream.url, "mindie"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": True})
    events = sse_json(await resp.read())
    assert "truncated" in events[-2]["error"]["message"]
    assert events[-1] == "[DONE]"


async def test_midstream_error_event_reaches_openai_client(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = sse_reply(frames("midstream_error_stream.txt"))
    gw = await make_gateway(triton_route(upstream.url, "trtllm"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": True})
    assert resp.status == 200
    events = sse_json(await resp.read())
    assert events[0]["choices"][0]["text"] == " Machine"
    assert "out of memory" in events[1]["error"]["message"]
    assert events[-1] == "[DONE]"


async def test_error_in_200_body_is_an_error_for_openai_client(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = json_reply({"error": "generate expects model to produce exactly 1 response"})
    gw = await make_gateway(triton_route(upstream.url, "vllm"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "x"})
    assert resp.status == 502
    assert "exactly 1 response" in (await resp.json())["error"]["message"]


async def test_upstream_error_status_keeps_message(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = raw_reply(raw("error.json"), status=400)
    gw = await make_gateway(triton_route(upstream.url, "trtllm"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "x"})
    assert resp.status == 400
    assert (await resp.json())["error"]["message"].endswith("error message")


async def test_refused_params(upstream: FakeUpstream, make_gateway: Any):
    gw = await make_gateway(triton_route(upstream.url, "trtllm"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "x", "logprobs": 2})
    assert resp.status == 400 and "logprobs" in (await resp.json())["error"]["message"]
    resp = await gw.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert resp.status == 400 and "tokenizer" in (await resp.json())["error"]["message"]
    assert upstream.requests == []


async def test_openai_chat_to_trtllm_with_template(upstream: FakeUpstream, make_gateway: Any, tmp_path: Path):
    folder = build_tokenizer_folder(tmp_path / "tok")
    upstream.reply = raw_reply(b'{"model_name":"ensemble","model_version":"1","text_output":"Hello world"}')
    gw = await make_gateway(triton_route(upstream.url, "trtllm", tokenizer=folder))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    resp = await gw.post("/v1/chat/completions", json={"model": "m", "messages": messages, "max_tokens": 50})
    body = await resp.json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hello world"}
    assert body["choices"][0]["finish_reason"] == "stop"
    prompt = upstream.last.json["text_input"]
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert "Be brief." in prompt
    # Counted with the tokenizer: the gateway has no other source for trtllm without log probs.
    assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["completion_tokens"] > 0


# ---- triton -> triton ------------------------------------------------------------------------


async def test_triton_to_triton_forwards_the_body(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = raw_reply(raw("vllm_response.json"))
    gw = await make_gateway(one_route("triton", "triton", upstream.url, model="vllm_model", options={"flavor": "vllm"}))
    body = jsonutil.loads(raw("vllm_request.json"))
    resp = await gw.post("/v2/models/front/generate", json={**body, "id": "c1"})
    # The backend's answer as it came, every key kept, but for the name the client used.
    assert await resp.read() == raw("vllm_response.json").replace(b'"vllm_model"', b'"front"', 1)
    assert upstream.last.path == "/v2/models/vllm_model/generate"
    assert upstream.last.json == {**body, "id": "c1"}


async def test_triton_to_triton_stream(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = sse_reply(frames("mindie_stream.txt"))
    gw = await make_gateway(
        one_route("triton", "triton", upstream.url, model="llama_65b", options={"flavor": "mindie"})
    )
    body = jsonutil.loads(raw("mindie_request.json"))
    resp = await gw.post("/v2/models/llama/generate_stream", json=body)
    # Each event as it came (MindIE's `data:` without the space), but for the name the client used.
    assert await resp.read() == b"".join(f.replace(b'"llama_65b"', b'"llama"', 1) for f in frames("mindie_stream.txt"))
    assert upstream.last.path == "/v2/models/llama_65b/generate_stream"
    assert upstream.last.json == body


async def test_triton_to_triton_midstream_error(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = sse_reply(frames("midstream_error_stream.txt"))
    gw = await make_gateway(one_route("triton", "triton", upstream.url, model="ensemble"))
    resp = await gw.post("/v2/models/ensemble/generate_stream", json={"text_input": "x", "max_tokens": 3})
    events = sse_json(await resp.read())
    assert events[0]["text_output"] == " Machine"
    assert list(events[1]) == ["error"] and "out of memory" in events[1]["error"]


# ---- health and metadata ---------------------------------------------------------------------


def health_upstream(up: FakeUpstream, status: int) -> None:
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.Response(status=status)

    up.reply = reply


NOT_READY = (400, {"error": "Model version not ready"})  # what Triton says


async def test_health_when_ready(upstream: FakeUpstream, make_gateway: Any):
    health_upstream(upstream, 200)
    config = one_route("triton", "triton", upstream.url, model="ensemble", options={"flavor": "vllm"})
    config["routes"][0]["models"] = ["llm"]
    gw = await make_gateway(config)
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/llm/ready"):
        resp = await gw.get(path)
        assert (resp.status, await resp.read()) == (200, b""), path
    # A model's readiness is the backend's, for the backend's name and the version asked.
    assert upstream.last.path == "/v2/models/ensemble/ready"
    resp = await gw.get("/v2/models/llm/versions/1/ready")
    assert resp.status == 200 and upstream.last.path == "/v2/models/ensemble/versions/1/ready"
    resp = await gw.get("/v2/models/nope")
    assert resp.status == 404 and "nope" in (await resp.json())["error"]
    resp = await gw.get("/v2/models/nope/ready")
    assert (resp.status, await resp.json()) == NOT_READY


async def test_metadata_and_config_are_the_backends_renamed(upstream: FakeUpstream, make_gateway: Any):
    meta = {"name": "ensemble", "versions": ["1"], "platform": "python", "inputs": [], "outputs": []}
    conf = {"name": "ensemble", "backend": "python", "max_batch_size": 0}

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        body = {"/v2/models/ensemble": meta, "/v2/models/ensemble/config": conf}.get(request.path)
        if request.path == "/v2":
            body = {"name": "triton", "version": "2.51.0", "extensions": []}
        return web.json_response(body) if body else web.json_response({"error": "unknown"}, status=404)

    upstream.reply = reply
    config = one_route("triton", "triton", upstream.url, model="ensemble")
    config["routes"][0]["models"] = ["llm"]
    gw = await make_gateway(config)
    assert await (await gw.get("/v2/models/llm")).json() == {**meta, "name": "llm"}
    assert await (await gw.get("/v2/models/llm/config")).json() == {**conf, "name": "llm"}
    assert (await (await gw.get("/v2")).json())["version"] == "2.51.0"
    resp = await gw.get("/v2/models/llm/versions/3")
    assert resp.status == 404 and upstream.last.path == "/v2/models/ensemble/versions/3"


async def test_metadata_of_another_dialects_backend_says_what_the_route_reads(upstream, make_gateway):
    gw = await make_gateway(one_route("triton", "openai", upstream.url, model="m"))
    meta = await (await gw.get("/v2/models/m")).json()
    assert meta["name"] == "m" and meta["versions"] == ["1"] and meta["platform"] == "gateway"
    assert {"name": "text_input", "datatype": "BYTES", "shape": [1]} in meta["inputs"]
    assert {"name": "stop_words", "datatype": "BYTES", "shape": [-1]} in meta["inputs"]
    conf = await (await gw.get("/v2/models/m/config")).json()
    assert conf["name"] == "m" and conf["model_transaction_policy"] == {"decoupled": True}
    assert (await gw.get("/v2/models/m/versions/2")).status == 404
    assert (await (await gw.get("/v2")).json())["name"] == "llm-gateway"
    assert not upstream.requests


async def test_health_when_backend_not_ready(upstream: FakeUpstream, make_gateway: Any):
    health_upstream(upstream, 400)
    gw = await make_gateway(one_route("triton", "triton", upstream.url, model="ensemble"))
    resp = await gw.get("/v2/health/ready")
    assert (resp.status, await resp.read()) == (400, b"")
    resp = await gw.get("/v2/models/x/ready")
    assert (resp.status, await resp.json()) == NOT_READY
    resp = await gw.get("/v2/health/live")
    assert resp.status == 200
