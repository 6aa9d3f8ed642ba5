"""The Triton simulator in each flavour (TRT-LLM, vLLM backend, MindIE) against the wire as those
servers write it; the gateway's Triton backend of each flavour in front of the simulator of the
same flavour, through the openai SDK; the vLLM-backend fields on the gateway's own Triton inbound;
and `gateway simulate --option`.
"""

import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from openai import AsyncOpenAI

from gateway import jsonutil
from gateway.codec.contract import RenderContext
from gateway.dialects.triton import inbound, render
from gateway.neutral.errors import UpstreamError
from gateway.neutral.events import FinishEvent, TextDelta
from gateway.neutral.types import Finish
from gateway.simulator.server import SimOptionError, create_sim_app
from tests.conftest import one_route
from tests.support import FakeUpstream, json_reply, sse_json

FIX = Path(__file__).parent / "fixtures" / "triton"
ROOT = Path(__file__).resolve().parent.parent
# What the fake model answers to the prompt "hello there": 13 whitespace tokens.
ANSWER = "Simulated answer 0: you said hello there. The gateway works end to end."
VLLM_FLAGS = {"return_finish_reason": True, "return_num_input_tokens": True, "return_num_output_tokens": True}


def fixture(name: str) -> Any:
    return jsonutil.loads((FIX / name).read_bytes())


def fixture_events(name: str) -> list[dict[str, Any]]:
    text = (FIX / name).read_text()
    return [jsonutil.loads(line.partition(":")[2]) for line in text.splitlines() if line.startswith("data:")]


def same_shape(got: Any, want: Any, where: str = "") -> None:
    """Same keys, and each value of the same JSON kind (a null in the fixture allows only null)."""
    if isinstance(want, dict):
        assert isinstance(got, dict), where
        assert list(got) == list(want), where
        for k in want:
            same_shape(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, bool) or want is None:
        assert got is want if want is None else isinstance(got, bool), where
    elif isinstance(want, int | float):
        assert isinstance(got, int | float) and not isinstance(got, bool), where
    else:
        assert type(got) is type(want), where


async def sim(aiohttp_client: Any, flavor: str, **kw: Any) -> TestClient:
    return await aiohttp_client(create_sim_app("triton", options={"flavor": flavor}, **kw))


async def events(resp: aiohttp.ClientResponse, space: bool = True) -> list[dict[str, Any]]:
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    body = await resp.read()
    frames = [f for f in body.split(b"\n\n") if f]
    prefix = b"data: " if space else b"data:{"
    assert all(f.startswith(prefix) for f in frames), body
    return [jsonutil.loads(f[5:]) for f in frames]


# ---- TensorRT-LLM ----------------------------------------------------------------------------


async def test_trtllm_answer_has_the_ensemble_shape(aiohttp_client: Any):
    c = await sim(aiohttp_client, "trtllm")
    req = fixture("trtllm_request.json")
    r = await c.post("/v2/models/ensemble/generate", json=req)
    assert r.status == 200
    out = await r.json()
    same_shape(out, fixture("trtllm_response.json"))
    assert out["model_name"] == "ensemble" and out["model_version"] == "1"
    # exclude_input_in_output defaults to false on the ensemble: the prompt comes back first.
    answer = "Simulated answer 0: you said What is machine learning?. The gateway works end to end."
    assert out["text_output"] == "What is machine learning?" + answer
    assert out["output_log_probs"] == [0.0] * 15  # one per generated token; zeros unless asked for


async def test_trtllm_log_probs_exclude_input_and_max_tokens(aiohttp_client: Any):
    c = await sim(aiohttp_client, "trtllm")
    body = {"text_input": "hello there", "max_tokens": 4, "exclude_input_in_output": True, "return_log_probs": True}
    out = await (await c.post("/v2/models/ensemble/generate", json=body)).json()
    assert out["text_output"] == "Simulated answer 0: you"
    assert len(out["output_log_probs"]) == 4 and any(v != 0 for v in out["output_log_probs"])
    assert out["cum_log_probs"] == pytest.approx(sum(out["output_log_probs"]))


async def test_trtllm_requires_max_tokens(aiohttp_client: Any):
    c = await sim(aiohttp_client, "trtllm")
    for path in ("generate", "generate_stream"):
        r = await c.post(f"/v2/models/ensemble/{path}", json={"text_input": "hi", "max_new_tokens": 5})
        assert r.status == 400
        assert await r.json() == {"error": "missing required input 'max_tokens'"}


async def test_trtllm_stream_shape_and_stop_word_kept(aiohttp_client: Any):
    c = await sim(aiohttp_client, "trtllm")
    want = fixture_events("trtllm_stream.txt")
    body = {"text_input": "hello there", "max_tokens": 50, "stop_words": [" you"], "stream": True}
    evs = await events(await c.post("/v2/models/ensemble/generate_stream", json=body))
    for ev in evs:
        same_shape(ev, want[1])  # one token per event: output_log_probs is unwrapped to a scalar
    # TRT-LLM stops after the stop word, which stays in the output; never the prompt in a stream.
    assert "".join(e["text_output"] for e in evs) == "Simulated answer 0: you"
    whole = {**body, "exclude_input_in_output": True}
    out = await (await c.post("/v2/models/ensemble/generate", json=whole)).json()
    assert out["text_output"] == "Simulated answer 0: you"


# ---- vLLM backend ----------------------------------------------------------------------------


async def test_vllm_answer_has_the_backend_shape(aiohttp_client: Any):
    c = await sim(aiohttp_client, "vllm")
    body = {**fixture("vllm_request.json"), **VLLM_FLAGS}
    r = await c.post("/v2/models/vllm_model/generate", json=body)
    out = await r.json()
    same_shape(out, fixture("vllm_response.json"))
    prompt = "What is Triton Inference Server?"
    # The prompt is echoed unless excluded.
    assert out["text_output"] == prompt + f"Simulated answer 0: you said {prompt}. The gateway works end to end."
    assert (out["finish_reason"], out["num_input_tokens"], out["num_output_tokens"]) == ("stop", 5, 16)
    # vLLM's default max_tokens is 16: one more word in the prompt makes the answer longer than that.
    longer = {**body, "text_input": "So what is Triton Inference Server?"}
    out = await (await c.post("/v2/models/vllm_model/generate", json=longer)).json()
    assert (out["finish_reason"], out["num_output_tokens"]) == ("length", 16)
    assert out["text_output"].endswith("The gateway works end to")
    # Without the flags, none of the extra outputs.
    plain = await (await c.post("/v2/models/vllm_model/generate", json=fixture("vllm_request.json"))).json()
    assert list(plain) == ["model_name", "model_version", "text_output"]


async def test_vllm_sampling_parameters_replace_request_parameters(aiohttp_client: Any):
    c = await sim(aiohttp_client, "vllm")
    sp = jsonutil.dumps_str({"max_tokens": 30, "stop": ["zzz", " said"], "temperature": 0})
    body = {"text_input": "hello there", "sampling_parameters": sp, "max_tokens": 2, "exclude_input_in_output": True}
    out = await (await c.post("/v2/models/m/generate", json={**body, **VLLM_FLAGS})).json()
    assert out["text_output"] == "Simulated answer 0: you"
    assert (out["finish_reason"], out["num_output_tokens"]) == ("stop", 4)
    sp = jsonutil.dumps_str({"max_tokens": 30, "stop": [" said"], "include_stop_str_in_output": True})
    out = await (await c.post("/v2/models/m/generate", json={**body, "sampling_parameters": sp})).json()
    assert out["text_output"] == "Simulated answer 0: you said"


@pytest.mark.parametrize(
    ("sp", "message"),
    [
        ("{not json", "'sampling_parameters' is not valid JSON"),
        ("[1, 2]", "'sampling_parameters' must hold a JSON object"),
        (5, "'sampling_parameters' must be a string holding a JSON object"),
        ('{"max_tokens": "lots"}', "max_tokens"),
    ],
)
async def test_vllm_bad_sampling_parameters_are_400(aiohttp_client: Any, sp: Any, message: str):
    c = await sim(aiohttp_client, "vllm")
    r = await c.post("/v2/models/m/generate", json={"text_input": "hi", "sampling_parameters": sp})
    assert r.status == 400
    assert message in (await r.json())["error"]


async def test_vllm_stream_shape_finish_and_counts(aiohttp_client: Any):
    c = await sim(aiohttp_client, "vllm")
    want = fixture_events("vllm_stream.txt")
    sp = jsonutil.dumps_str({"max_tokens": 5})
    body = {"text_input": "hello there", "stream": True, "sampling_parameters": sp, **VLLM_FLAGS}
    evs = await events(await c.post("/v2/models/m/generate_stream", json=body))
    assert len(evs) == 5
    for ev, w in zip(evs, [want[0]] * 4 + [want[-1]], strict=True):
        same_shape(ev, w)
    assert [e["finish_reason"] for e in evs] == ["None"] * 4 + ["length"]
    assert {e["num_input_tokens"] for e in evs} == {2}
    assert sum(e["num_output_tokens"] for e in evs) == 5
    assert "".join(e["text_output"] for e in evs) == "Simulated answer 0: you said"
    # A stream never returns the prompt, and asking it to is an error.
    r = await c.post("/v2/models/m/generate_stream", json={**body, "exclude_input_in_output": False})
    assert r.status == 400 and "exclude_input_in_output" in (await r.json())["error"]


# ---- MindIE ----------------------------------------------------------------------------------


async def test_mindie_answer_has_mindie_shape(aiohttp_client: Any):
    c = await sim(aiohttp_client, "mindie")
    r = await c.post("/v2/models/llama_65b/generate", json=fixture("mindie_request.json"))
    out = await r.json()
    same_shape(out, fixture("mindie_response.json"))
    assert out["id"] == "a123" and out["model_version"] is None
    # max_new_tokens (20) is more than the answer: it ends on its own; no prompt echo.
    assert out["text_output"] == "Simulated answer 0: you said My name is. The gateway works end to end."
    assert out["details"]["finish_reason"] == "eos_token" and out["details"]["generated_tokens"] == 14


async def test_mindie_reads_only_its_own_names(aiohttp_client: Any):
    c = await sim(aiohttp_client, "mindie")
    body = {"text_input": "hello there", "max_tokens": 1, "stop_words": [" you"], "parameters": {"max_new_tokens": 3}}
    r = await c.post("/v2/models/m/generate", json=body)
    out = await r.json()
    assert out["text_output"] == "Simulated answer 0:"  # max_new_tokens counts; stop words do not exist here
    assert "details" not in out
    assert re.fullmatch(r"[0-9a-f]{32}", out["id"])  # MindIE's own id when the client gave none
    r = await c.post("/v2/models/m/generate", json={"text_input": "x", "id": "not ok!"})
    assert r.status == 400


async def test_mindie_stream_without_space_and_details(aiohttp_client: Any):
    c = await sim(aiohttp_client, "mindie")
    want = fixture_events("mindie_stream.txt")
    body = {"id": "a123", "text_input": "hello there", "parameters": {"details": True, "max_new_tokens": 3}}
    evs = await events(await c.post("/v2/models/llama_65b/generate_stream", json=body), space=False)
    assert len(evs) == 3
    for ev, w in zip(evs, want, strict=True):
        same_shape(ev, w)
    assert [e["details"]["generated_tokens"] for e in evs] == [1, 2, 3]
    assert [e["details"].get("finish_reason") for e in evs] == [None, None, "length"]
    assert isinstance(evs[0]["prefill_time"], int) and evs[1]["prefill_time"] is None
    # Without details nothing marks the last event.
    body["parameters"] = {"max_new_tokens": 2}
    evs = await events(await c.post("/v2/models/llama_65b/generate_stream", json=body), space=False)
    assert evs == [
        {"id": "a123", "model_name": "llama_65b", "model_version": None, "text_output": "Simulated"},
        {"id": "a123", "model_name": "llama_65b", "model_version": None, "text_output": " answer"},
    ]


# ---- health ----------------------------------------------------------------------------------


@pytest.mark.parametrize("flavor", ["trtllm", "vllm", "mindie"])
async def test_health_routes(aiohttp_client: Any, flavor: str):
    c = await aiohttp_client(create_sim_app("triton", model="ensemble", options={"flavor": flavor}))
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/ensemble/ready"):
        r = await c.get(path)
        assert (r.status, await r.read()) == (200, b""), path
    # Triton's answer for a model it does not have.
    r = await c.get("/v2/models/other/ready")
    assert r.status == 400 and "error" in await r.json()


def test_options_are_validated():
    with pytest.raises(SimOptionError, match=r"^invalid option for a triton simulator: flavor: Input should be"):
        create_sim_app("triton", options={"flavor": "tgi"})
    with pytest.raises(SimOptionError, match="bogus: Extra inputs are not permitted"):
        create_sim_app("triton", options={"bogus": 1})


# ---- the gateway's triton backend of each flavour in front of that flavour's simulator --------


@pytest.fixture(params=["trtllm", "vllm", "mindie"])
async def sdk(request: Any, aiohttp_server: Any, make_gateway: Any, tokenizer_folder: str) -> AsyncOpenAI:
    flavor = request.param
    server = await aiohttp_server(create_sim_app("triton", options={"flavor": flavor}))
    url = str(server.make_url("")).rstrip("/")
    config = one_route(
        "openai", "triton", url, model="ensemble", tokenizer=tokenizer_folder, options={"flavor": flavor}
    )
    gw = await make_gateway(config)
    client = AsyncOpenAI(base_url=str(gw.make_url("/v1")), api_key="k", max_retries=0)
    client.flavor = flavor  # type: ignore[attr-defined]
    return client


async def test_completions(sdk: AsyncOpenAI):
    out = await sdk.completions.create(model="m", prompt="hello there", max_tokens=50)
    assert out.choices[0].text == ANSWER
    assert out.choices[0].finish_reason == "stop"
    assert out.usage is not None and out.usage.completion_tokens == 13
    if sdk.flavor == "vllm":  # type: ignore[attr-defined]
        assert out.usage.prompt_tokens == 2  # the server's own count, not the tokenizer's


async def test_completions_cut_by_max_tokens(sdk: AsyncOpenAI):
    out = await sdk.completions.create(model="m", prompt="hello there", max_tokens=4)
    assert out.choices[0].text == "Simulated answer 0: you"
    assert out.choices[0].finish_reason == "length"
    assert out.usage is not None and out.usage.completion_tokens == 4


async def test_completions_stream(sdk: AsyncOpenAI):
    stream = await sdk.completions.create(
        model="m", prompt="hello there", max_tokens=4, stream=True, stream_options={"include_usage": True}
    )
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Simulated answer 0: you"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


@pytest.mark.parametrize("stream", [False, True])
async def test_stop_strings_end_to_end(sdk: AsyncOpenAI, stream: bool):
    if stream:
        s = await sdk.completions.create(model="m", prompt="hello there", stop=[" you", "zz"], stream=True)
        chunks = [c async for c in s]
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    else:
        out = await sdk.completions.create(model="m", prompt="hello there", stop=[" you", "zz"])
        text, finish = out.choices[0].text, [out.choices[0].finish_reason]
    assert text == "Simulated answer 0:"
    assert finish == ["stop"]


async def test_chat(sdk: AsyncOpenAI):
    out = await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
    content = out.choices[0].message.content
    assert content is not None and content.startswith("Simulated answer 0: you said")
    assert content.endswith("The gateway works end to end.")
    assert out.choices[0].finish_reason == "stop"
    assert out.usage is not None and out.usage.completion_tokens == len(content.split())


async def test_chat_stream(sdk: AsyncOpenAI):
    stream = await sdk.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Hi"}], stream=True, max_tokens=3
    )
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Simulated answer 0:"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


# ---- the gateway's own Triton inbound takes the vLLM backend's fields ------------------------


def _openai_completion(text: str, finish: str, usage: dict[str, int] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
    }
    if usage is not None:
        body["usage"] = {**usage, "total_tokens": sum(usage.values())}
    return body


async def test_inbound_sampling_parameters_merge_and_flags(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = json_reply(_openai_completion("Paris.", "length", {"prompt_tokens": 6, "completion_tokens": 2}))
    gw = await make_gateway(one_route("triton", "openai", upstream.url, options={"extensions": "vllm"}))
    sp = jsonutil.dumps_str({"max_tokens": 2, "stop": ["\n\n", "###"], "stop_token_ids": [7]})
    body = {"text_input": "Capital of France?", "sampling_parameters": sp, "max_tokens": 50, "temperature": 0.5}
    r = await gw.post("/v2/models/m/generate", json={**body, **VLLM_FLAGS})
    assert r.status == 200
    assert await r.json() == {
        "model_name": "m",
        "model_version": "1",
        "text_output": "Paris.",
        "finish_reason": "length",
        "num_input_tokens": 6,
        "num_output_tokens": 2,
    }
    sent = upstream.requests[0].json
    # sampling_parameters' keys win; the other parameters still count.
    assert (sent["max_tokens"], sent["stop"], sent["temperature"]) == (2, ["\n\n", "###"], 0.5)
    assert sent["stop_token_ids"] == [7]
    r = await gw.post("/v2/models/m/generate", json={"text_input": "x", "sampling_parameters": "{oops"})
    assert r.status == 400 and await r.json() == {"error": "'sampling_parameters' is not valid JSON"}


async def test_inbound_counts_are_never_invented(upstream: FakeUpstream, make_gateway: Any):
    upstream.reply = json_reply(_openai_completion("Paris.", "stop", None))
    gw = await make_gateway(one_route("triton", "openai", upstream.url))
    r = await gw.post("/v2/models/m/generate", json={"text_input": "Capital?", **VLLM_FLAGS})
    assert await r.json() == {"model_name": "m", "model_version": "1", "text_output": "Paris.", "finish_reason": "stop"}


async def test_inbound_stream_flags_against_a_simulated_backend(make_gateway: Any):
    config = {
        "backends": {"sim": {"dialect": "openai", "simulate": True}},
        "routes": [{"name": "r", "dialect": "triton", "backend": "sim"}],
    }
    gw = await make_gateway(config)
    body = {"text_input": "hello there", "max_tokens": 3, **VLLM_FLAGS}
    evs = await events(await gw.post("/v2/models/m/generate_stream", json=body))
    assert [e["text_output"] for e in evs] == ["Simulated", " answer", " 0:"]
    assert [e["finish_reason"] for e in evs] == ["None", "None", "length"]
    # The prompt count is known only at the end; the output counts add up to the total.
    assert ["num_input_tokens" in e for e in evs] == [False, False, True] and evs[-1]["num_input_tokens"] == 2
    assert sum(e.get("num_output_tokens", 0) for e in evs) == 3
    # Without the flags the stream is the plain Triton one.
    evs = await events(
        await gw.post("/v2/models/m/generate_stream", json={"text_input": "hello there", "max_tokens": 2})
    )
    assert evs == [
        {"model_name": "m", "model_version": "1", "text_output": "Simulated"},
        {"model_name": "m", "model_version": "1", "text_output": " answer"},
    ]


async def test_simulated_gateway_backend_follows_its_flavour(make_gateway: Any):
    # A `simulate: true` triton backend imitates the flavour its options name.
    config = {
        "backends": {"sim": {"dialect": "triton", "simulate": True, "options": {"flavor": "mindie"}}},
        "routes": [{"name": "r", "dialect": "openai", "backend": "sim"}],
    }
    gw = await make_gateway(config)
    r = await gw.post("/v1/completions", json={"model": "m", "prompt": "hello there", "max_tokens": 3})
    out = await r.json()
    assert out["choices"][0]["text"] == "Simulated answer 0:"
    assert out["choices"][0]["finish_reason"] == "length"


# ---- the command line ------------------------------------------------------------------------


def gateway(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gateway", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_simulate_bad_option_exits_2():
    r = gateway("simulate", "--dialect", "triton", "--option", "flavor=tgi", "--port", "0")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "invalid option for a triton simulator: flavor: Input should be 'trtllm', 'vllm' or 'mindie'"
    ]
    r = gateway("simulate", "--dialect", "triton", "--option", "flavor", "--port", "0")
    assert r.returncode == 2 and r.stderr.strip() == "--option 'flavor': expected NAME=VALUE"


@pytest.fixture
async def vllm_sim_process() -> AsyncIterator[str]:
    args = ["simulate", "--dialect", "triton", "--option", "flavor=vllm", "--option", "count_tokens=false"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", *args, "--port", "0", cwd=ROOT, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    try:
        while True:
            line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
            assert line, "the simulator exited early"
            m = re.search(r"listening on (http://[\d.]+:\d+)$", line.strip())
            if m:
                yield m.group(1)
                break
    finally:
        proc.terminate()
        await proc.wait()


async def test_simulate_vllm_flavour_over_the_network(vllm_sim_process: str):
    body = {"text_input": "hello there", "sampling_parameters": '{"max_tokens": 3}', **VLLM_FLAGS}
    async with aiohttp.ClientSession() as s:
        async with s.post(vllm_sim_process + "/v2/models/m/generate", json=body) as r:
            assert r.status == 200
            out = await r.json()
        async with s.post(vllm_sim_process + "/v2/models/m/generate_stream", json=body) as r:
            evs = sse_json(await r.read())
    assert out == {
        "model_name": "m",
        "model_version": "1",
        "text_output": "hello thereSimulated answer 0:",
        "finish_reason": "length",
        "num_input_tokens": 2,
        "num_output_tokens": 3,
    }
    assert [e["finish_reason"] for e in evs] == ["None", "None", "length"]


def test_held_back_event_comes_before_an_error_and_an_empty_stream_still_answers():
    body = jsonutil.dumps({"text_input": "x", "return_finish_reason": True})
    req = inbound.GENERATE_STREAM.parse(body, {"model": "m"})  # POST /v2/models/m/generate_stream
    ctx = RenderContext(request_id="rid", created=1, model="m")
    r = render.stream_renderer(req, ctx)
    assert r.render([TextDelta("a")]) == b""  # held until the next event or the end
    assert (
        r.render([TextDelta("b")])
        == b'data: {"model_name":"m","model_version":"1","text_output":"a","finish_reason":"None"}\n\n'
    )
    assert r.error(UpstreamError("gone")) == (
        b'data: {"model_name":"m","model_version":"1","text_output":"b","finish_reason":"None"}\n\n'
        b'data: {"error":"gone"}\n\n'
    )
    assert r.end() == b""
    r = render.stream_renderer(req, ctx)
    assert r.render([FinishEvent(Finish.LENGTH)]) == b""
    assert r.end() == b'data: {"model_name":"m","model_version":"1","text_output":"","finish_reason":"length"}\n\n'
