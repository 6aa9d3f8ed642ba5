"""Real client libraries, as users run them, against a gateway process in front of the real servers.

One `gateway serve` process holds a route per case: TGI, OpenAI and Databricks clients in front of
the real vLLM, and OpenAI, Databricks and Triton clients in front of the real Triton. Each test asks
the same question through the gateway and of the server itself (greedy decoding, so the answers
are deterministic) and compares what the client library makes of each.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tests.real.servers import Server, free_port

TIMEOUT = 120.0
PROMPT = "The quick brown fox"  # the tiny model answers it with plain ASCII tokens
MESSAGES = [{"role": "user", "content": "hello there my friend"}]


# ---- the gateway process ----------------------------------------------------------------------


@dataclass
class Gateway:
    url: str
    port: int
    log: Path


def gateway_config(vllm_url: str, triton_url: str, tokenizer: Path) -> dict[str, Any]:
    tok = str(tokenizer)
    return {
        "backends": {
            "vllm": {
                "dialect": "openai",
                "url": vllm_url,
                "model": "tiny",
                "tokenizer": tok,
                "timeout_s": TIMEOUT,
                "options": {"extensions": "vllm"},
            },
            "triton-ensemble": {
                "dialect": "triton",
                "url": triton_url,
                "model": "ensemble",
                "tokenizer": tok,
                "options": {"flavor": "trtllm", "count_tokens": True},
            },
            "triton-vllm": {
                "dialect": "triton",
                "url": triton_url,
                "model": "vllm_model",
                "tokenizer": tok,
                "options": {"flavor": "vllm"},
            },
            # No `model:`: the client's model names the backend's model.
            "triton-any": {"dialect": "triton", "url": triton_url},
        },
        "routes": [
            {"name": "openai-vllm", "dialect": "openai", "backend": "vllm", "models": ["tiny"]},
            {"name": "openai-triton", "dialect": "openai", "backend": "triton-ensemble", "models": ["ens"]},
            {"name": "tgi-vllm", "dialect": "tgi", "backend": "vllm"},
            {"name": "dbx-vllm", "dialect": "databricks", "backend": "vllm", "models": ["dbx-vllm"]},
            {"name": "dbx-triton", "dialect": "databricks", "backend": "triton-vllm", "models": ["dbx-triton"]},
            {"name": "triton-ens", "dialect": "triton", "backend": "triton-ensemble", "models": ["gw-ensemble"]},
            {"name": "triton-vllm", "dialect": "triton", "backend": "triton-vllm", "models": ["vllm_model"]},
            {"name": "triton-any", "dialect": "triton", "backend": "triton-any"},
        ],
    }


@contextmanager
def serve(config: dict[str, Any], home: Path) -> Iterator[Gateway]:
    """`gateway serve --config FILE` in its own process, as a user runs it, until /healthz answers."""
    port = free_port()
    file = home / "gateway.yaml"
    file.write_text(yaml.safe_dump({"listen": {"host": "127.0.0.1", "port": port}, **config}))
    log = home / "gateway.log"
    exe = Path(sys.executable).parent / "gateway"
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "gateway"]
    with log.open("wb") as out:
        proc = subprocess.Popen([*cmd, "serve", "--config", str(file)], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"gateway not answering /healthz:\n{log.read_text()[-4000:]}")
            time.sleep(0.2)
        yield Gateway(url, port, log)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def gateway(
    vllm: Server, triton: Server, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """One gateway with every route of this module."""
    with serve(gateway_config(vllm.url, triton.url, tiny_model), tmp_path_factory.mktemp("gateway")) as gw:
        yield gw


@pytest.fixture(scope="module")
def triton_only_named(triton: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway whose one Triton route takes one model name, and no other."""
    config = {
        "backends": {"t": {"dialect": "triton", "url": triton.url, "model": "ensemble"}},
        "routes": [{"name": "t", "dialect": "triton", "backend": "t", "models": ["gw-ensemble"]}],
    }
    with serve(config, tmp_path_factory.mktemp("gateway-named")) as gw:
        yield gw


# ---- what the servers answer themselves -------------------------------------------------------


def post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(url, json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def vllm_completion(vllm: Server, prompt: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "return_token_ids": True}
    return post_json(vllm.url + "/v1/completions", {**body, **extra})


def vllm_chat(vllm: Server, messages: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
    body = {"model": "tiny", "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    return post_json(vllm.url + "/v1/chat/completions", body)


def triton_generate(triton: Server, model: str, body: dict[str, Any]) -> dict[str, Any]:
    return post_json(f"{triton.url}/v2/models/{model}/generate", body)


def render_chat(tokenizer: Path, messages: list[dict[str, Any]]) -> str:
    """The model's chat template rendered as transformers renders it (the prompt the gateway must
    send a text-only backend for a chat request)."""
    config = json.loads((tokenizer / "tokenizer_config.json").read_text())

    def special(name: str) -> str:
        value = config.get(name) or ""
        return str(value["content"] if isinstance(value, dict) else value)

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(config["chat_template"])
    return template.render(
        messages=messages, bos_token=special("bos_token"), eos_token=special("eos_token"), add_generation_prompt=True
    )


def ensemble_text(triton: Server, prompt: str, max_tokens: int, **extra: Any) -> str:
    body = {"text_input": prompt, "max_tokens": max_tokens, "exclude_input_in_output": True, **extra}
    return str(triton_generate(triton, "ensemble", body)["text_output"])


def vllm_model_text(triton: Server, prompt: str, max_tokens: int) -> dict[str, Any]:
    sampling = json.dumps({"max_tokens": max_tokens, "temperature": 0})
    body = {"text_input": prompt, "sampling_parameters": sampling, "exclude_input_in_output": True}
    return triton_generate(triton, "vllm_model", {**body, "return_finish_reason": True})


def sse_events(raw: bytes) -> list[Any]:
    """The JSON of each `data:` event of an SSE body (either framing), `[DONE]` as the string."""
    events = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:")]
        if data:
            payload = b"\n".join(data)
            events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return events


# ---- huggingface_hub InferenceClient: TGI route in front of vLLM ------------------------------


@pytest.fixture(scope="module")
def hf(gateway: Gateway) -> Any:
    from huggingface_hub import InferenceClient

    return InferenceClient(base_url=gateway.url, timeout=TIMEOUT)


TGI_FINISH = {"length": "length", "stop": "eos_token"}


def test_hf_text_generation_details_match_vllm(hf, vllm):
    out = hf.text_generation(PROMPT, max_new_tokens=10, details=True, do_sample=False)
    direct = vllm_completion(vllm, PROMPT, 10)
    choice = direct["choices"][0]
    assert out.generated_text == choice["text"]
    assert out.details is not None
    assert out.details.finish_reason == TGI_FINISH[choice["finish_reason"]]
    assert out.details.generated_tokens == direct["usage"]["completion_tokens"]
    ids = [t.id for t in out.details.tokens]
    assert len(ids) == direct["usage"]["completion_tokens"], f"details.tokens: {out.details.tokens}"
    assert None not in ids
    assert ids == choice["token_ids"]
    assert "".join(t.text for t in out.details.tokens) == choice["text"]


def test_hf_text_generation_stream_one_event_per_token(hf, vllm):
    events = list(hf.text_generation(PROMPT, max_new_tokens=10, details=True, stream=True, do_sample=False))
    direct = vllm_completion(vllm, PROMPT, 10)
    choice = direct["choices"][0]
    n = direct["usage"]["completion_tokens"]
    texts = [e.token.text for e in events]
    assert len(events) == n, f"{len(events)} events for {n} tokens: {texts}"
    ids = [e.token.id for e in events]
    assert None not in ids
    assert ids == choice["token_ids"]
    assert "".join(texts) == choice["text"]
    assert all(e.generated_text is None and e.details is None for e in events[:-1])
    last = events[-1]
    assert last.generated_text == choice["text"]
    assert last.details is not None
    assert last.details.finish_reason == TGI_FINISH[choice["finish_reason"]]
    assert last.details.generated_tokens == n


def _stop_string(vllm: Server) -> str:
    """A token the model generates for PROMPT a few tokens in, not seen before it."""
    direct = vllm_completion(vllm, PROMPT, 10, logprobs=0)
    pieces = direct["choices"][0]["logprobs"]["tokens"]
    for i, piece in enumerate(pieces[2:], start=2):
        word = piece.strip()
        if len(word) >= 2 and word.isascii() and word.isalpha() and word not in "".join(pieces[:i]):
            return word
    raise AssertionError(f"no usable stop string in {pieces}")


def test_hf_text_generation_stop_sequence_kept(hf, vllm):
    stop = _stop_string(vllm)
    direct = vllm_completion(vllm, PROMPT, 10, stop=[stop], include_stop_str_in_output=True)
    choice = direct["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["text"].endswith(stop)  # the server's own behaviour
    out = hf.text_generation(PROMPT, max_new_tokens=10, details=True, do_sample=False, stop=[stop])
    assert stop in out.generated_text  # TGI keeps the stop text
    assert out.generated_text == choice["text"]
    assert out.details.finish_reason == "stop_sequence"
    assert out.details.generated_tokens == direct["usage"]["completion_tokens"]


def test_hf_text_generation_stream_stop_sequence_kept(hf, vllm):
    stop = _stop_string(vllm)
    direct = vllm_completion(vllm, PROMPT, 10, stop=[stop], include_stop_str_in_output=True)
    choice = direct["choices"][0]
    events = list(
        hf.text_generation(PROMPT, max_new_tokens=10, details=True, stream=True, do_sample=False, stop=[stop])
    )
    assert "".join(e.token.text for e in events) == choice["text"]
    assert events[-1].generated_text == choice["text"]
    assert events[-1].details.finish_reason == "stop_sequence"
    assert len(events) == events[-1].details.generated_tokens == direct["usage"]["completion_tokens"]


def test_hf_chat_completion_matches_vllm(hf, vllm):
    from huggingface_hub import InferenceClient

    direct_client = InferenceClient(base_url=vllm.url, timeout=TIMEOUT)
    out = hf.chat_completion(MESSAGES, model="tiny", max_tokens=8, temperature=0)
    direct = direct_client.chat_completion(MESSAGES, model="tiny", max_tokens=8, temperature=0)
    assert out.choices[0].message.content == direct.choices[0].message.content
    assert out.choices[0].finish_reason == direct.choices[0].finish_reason
    assert out.usage.completion_tokens == direct.usage.completion_tokens
    chunks = list(hf.chat_completion(MESSAGES, model="tiny", max_tokens=8, temperature=0, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == direct.choices[0].message.content


# ---- databricks-sdk: Databricks routes in front of Triton and vLLM ---------------------------


@pytest.fixture(scope="module")
def workspace(gateway: Gateway) -> Any:
    from databricks.sdk import WorkspaceClient

    return WorkspaceClient(host=gateway.url, token="dapi-anything", auth_type="pat")


def _ask(workspace: Any, name: str, max_tokens: int) -> Any:
    from databricks.sdk.service.serving import ChatMessage, ChatMessageRole

    messages = [ChatMessage(role=ChatMessageRole.USER, content=m["content"]) for m in MESSAGES]
    return workspace.serving_endpoints.query(name=name, messages=messages, max_tokens=max_tokens, temperature=0)


def test_databricks_query_vllm(workspace, vllm):
    from databricks.sdk.service.serving import QueryEndpointResponseObject

    res = _ask(workspace, "dbx-vllm", 8)
    direct = vllm_chat(vllm, MESSAGES, 8)
    assert res.object == QueryEndpointResponseObject.CHAT_COMPLETION
    assert res.choices[0].message.content == direct["choices"][0]["message"]["content"]
    # (the SDK reads a choice's finish reason from `finishReason`, which no endpoint sends: not checked here)
    assert res.usage.completion_tokens == direct["usage"]["completion_tokens"]
    assert res.served_model_name, "no served-model-name header"


def test_databricks_query_triton(workspace, triton, tiny_model):
    from databricks.sdk.service.serving import QueryEndpointResponseObject

    expected = vllm_model_text(triton, render_chat(tiny_model, MESSAGES), 6)
    res = _ask(workspace, "dbx-triton", 6)
    assert res.object == QueryEndpointResponseObject.CHAT_COMPLETION
    assert res.choices[0].message.content == expected["text_output"]
    assert res.usage.completion_tokens == 6
    assert res.served_model_name, "no served-model-name header"


@pytest.mark.parametrize("endpoint", ["dbx-vllm", "dbx-triton"])
def test_databricks_chat_wire(gateway, endpoint):
    r = httpx.post(
        f"{gateway.url}/serving-endpoints/{endpoint}/invocations",
        json={"messages": MESSAGES, "max_tokens": 3, "temperature": 0},
        headers={"Authorization": "Bearer dapi-anything"},
        timeout=TIMEOUT,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["finish_reason"] == "length"
    assert r.headers.get("served-model-name")


def test_databricks_open_ai_client(workspace, vllm, triton, tiny_model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        client = workspace.serving_endpoints.get_open_ai_client(max_retries=0, timeout=TIMEOUT)
    out = client.chat.completions.create(model="dbx-vllm", messages=MESSAGES, max_tokens=8, temperature=0)
    assert out.choices[0].message.content == vllm_chat(vllm, MESSAGES, 8)["choices"][0]["message"]["content"]
    out = client.chat.completions.create(model="dbx-triton", messages=MESSAGES, max_tokens=6, temperature=0)
    expected = vllm_model_text(triton, render_chat(tiny_model, MESSAGES), 6)["text_output"]
    assert out.choices[0].message.content == expected
    stream = client.chat.completions.create(
        model="dbx-triton", messages=MESSAGES, max_tokens=6, temperature=0, stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


# ---- openai SDK: OpenAI route in front of Triton (TensorRT-LLM ensemble) ----------------------


@pytest.fixture(scope="module")
def oai(gateway: Gateway) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)


def test_openai_chat_triton(oai, triton, tiny_model):
    expected = ensemble_text(triton, render_chat(tiny_model, MESSAGES), 6)
    out = oai.chat.completions.create(model="ens", messages=MESSAGES, max_tokens=6, temperature=0)
    assert out.object == "chat.completion" and out.model == "ens"
    assert out.choices[0].message.role == "assistant"
    assert out.choices[0].message.content == expected
    assert out.choices[0].finish_reason == "length"
    assert out.usage is not None and out.usage.completion_tokens == 6


def test_openai_chat_stream_triton(oai, triton, tiny_model):
    expected = ensemble_text(triton, render_chat(tiny_model, MESSAGES), 6)
    stream = oai.chat.completions.create(
        model="ens", messages=MESSAGES, max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    with_choices = [c for c in chunks if c.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in with_choices) == expected
    assert [c.choices[0].finish_reason for c in with_choices if c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6


def test_openai_completions_triton(oai, triton):
    prompt = "hello there friend"
    expected = ensemble_text(triton, prompt, 6)
    out = oai.completions.create(model="ens", prompt=prompt, max_tokens=6, temperature=0)
    assert out.choices[0].text == expected
    assert out.choices[0].finish_reason == "length"
    stream = oai.completions.create(model="ens", prompt=prompt, max_tokens=6, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == expected
    # TensorRT-LLM keeps the stop word; an OpenAI client gets the text before it.
    kept = ensemble_text(triton, prompt, 12, stop_words=[" gateway"])
    assert kept.endswith(" gateway")
    out = oai.completions.create(model="ens", prompt=prompt, max_tokens=12, temperature=0, stop=[" gateway"])
    assert out.choices[0].text == kept.removesuffix(" gateway")
    assert out.choices[0].finish_reason == "stop"


# ---- tritonclient: Triton routes in front of Triton -------------------------------------------

# (model the client names at the gateway, the model's name on the Triton server)
TRITON_MODELS = [("gw-ensemble", "ensemble"), ("vllm_model", "vllm_model"), ("minimal", "minimal")]


def _host(url: str) -> str:
    return url.removeprefix("http://")


@pytest.fixture(scope="module")
def triton_clients(gateway: Gateway, triton: Server) -> tuple[Any, Any]:
    from tritonclient.http import InferenceServerClient

    return InferenceServerClient(url=_host(gateway.url)), InferenceServerClient(url=_host(triton.url))


def test_tritonclient_server_calls(triton_clients):
    gw, direct = triton_clients
    assert gw.is_server_live() is direct.is_server_live() is True
    assert gw.is_server_ready() is direct.is_server_ready() is True
    assert gw.get_server_metadata() == direct.get_server_metadata()


@pytest.mark.parametrize(("name", "backend_name"), TRITON_MODELS)
def test_tritonclient_model_ready(triton_clients, name, backend_name):
    gw, direct = triton_clients
    assert gw.is_model_ready(name) is direct.is_model_ready(backend_name) is True


@pytest.mark.parametrize(("name", "backend_name"), TRITON_MODELS)
def test_tritonclient_model_metadata(triton_clients, name, backend_name):
    """The backend's own metadata, with the model named as the client named it."""
    gw, direct = triton_clients
    assert gw.get_model_metadata(name) == {**direct.get_model_metadata(backend_name), "name": name}


@pytest.mark.parametrize(("name", "backend_name"), TRITON_MODELS)
def test_tritonclient_model_config(triton_clients, name, backend_name):
    """The backend's own model configuration, with the model named as the client named it."""
    gw, direct = triton_clients
    assert gw.get_model_config(name) == {**direct.get_model_config(backend_name), "name": name}


def test_triton_unknown_model_on_catch_all_route(gateway, triton, triton_clients):
    """A route without `models:` hands any name to its backend, which does not know this one."""
    gw, direct = triton_clients
    assert gw.is_model_ready("no_such_model") is direct.is_model_ready("no_such_model") is False
    for path in ("/v2/models/no_such_model/ready", "/v2/models/no_such_model"):
        direct_status = httpx.get(triton.url + path, timeout=10).status_code
        assert (path, httpx.get(gateway.url + path, timeout=10).status_code) == (path, direct_status)


def test_triton_unknown_model_without_route(triton_only_named, triton):
    """No route takes the name: readiness says 400, as Triton says of a model it does not have."""
    assert httpx.get(triton.url + "/v2/models/no_such_model/ready", timeout=10).status_code == 400
    assert httpx.get(triton_only_named.url + "/v2/models/no_such_model/ready", timeout=10).status_code == 400
    assert httpx.get(triton_only_named.url + "/v2/models/gw-ensemble/ready", timeout=10).status_code == 200


VLLM_FLAGS = {"return_finish_reason": True, "return_num_output_tokens": True}
GENERATE_CASES = [
    ("minimal", "minimal", {"text_input": "hello there", "max_tokens": 3}),
    ("gw-ensemble", "ensemble", {"text_input": "hello there friend", "max_tokens": 5}),
    ("gw-ensemble", "ensemble", {"text_input": "hello there friend", "max_tokens": 5, "exclude_input_in_output": True}),
    (
        "vllm_model",
        "vllm_model",
        {"text_input": "hello there", "sampling_parameters": json.dumps({"max_tokens": 4}), **VLLM_FLAGS},
    ),
]
STREAM_CASES = [
    ("minimal", "minimal", {"text_input": "hello there", "max_tokens": 3}),
    ("gw-ensemble", "ensemble", {"text_input": "hello there friend", "max_tokens": 5, "stream": True}),
    (
        "vllm_model",
        "vllm_model",
        {"text_input": "hello", "stream": True, "sampling_parameters": json.dumps({"max_tokens": 4}), **VLLM_FLAGS},
    ),
]


def _same_answer(gw: dict[str, Any], direct: dict[str, Any], name: str) -> None:
    """The server's own answer, every field kept, with the model named as the client named it."""
    assert gw == {**direct, "model_name": name}, f"gateway {gw} vs direct {direct}"


@pytest.mark.parametrize(("name", "backend_name", "body"), GENERATE_CASES)
def test_triton_generate_matches_direct(gateway, triton, name, backend_name, body):
    direct = triton_generate(triton, backend_name, body)
    r = httpx.post(f"{gateway.url}/v2/models/{name}/generate", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    _same_answer(r.json(), direct, name)


@pytest.mark.parametrize(("name", "backend_name", "body"), STREAM_CASES)
def test_triton_generate_stream_matches_direct(gateway, triton, name, backend_name, body):
    d = httpx.post(f"{triton.url}/v2/models/{backend_name}/generate_stream", json=body, timeout=TIMEOUT)
    assert d.status_code == 200, d.text
    r = httpx.post(f"{gateway.url}/v2/models/{name}/generate_stream", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    gw_events, direct_events = sse_events(r.content), sse_events(d.content)
    assert len(gw_events) == len(direct_events), f"gateway {gw_events} vs direct {direct_events}"
    for g, e in zip(gw_events, direct_events, strict=True):
        _same_answer(g, e, name)


def test_triton_vllm_stream_counts_per_event(gateway, triton):
    """Triton's vLLM backend counts each streamed response's tokens (`num_output_tokens` on every
    event); a same-dialect route relays those counts as the server sent them."""
    body = {"text_input": "hello", "stream": True, "sampling_parameters": json.dumps({"max_tokens": 4}), **VLLM_FLAGS}
    d = httpx.post(f"{triton.url}/v2/models/vllm_model/generate_stream", json=body, timeout=TIMEOUT)
    r = httpx.post(f"{gateway.url}/v2/models/vllm_model/generate_stream", json=body, timeout=TIMEOUT)
    assert r.status_code == d.status_code == 200, r.text
    direct_counts = [e.get("num_output_tokens") for e in sse_events(d.content)]
    assert direct_counts == [1, 1, 1, 1]
    assert [e.get("num_output_tokens") for e in sse_events(r.content)] == direct_counts


# ---- langchain-openai: OpenAI route in front of vLLM ------------------------------------------


def _chat_openai(base_url: str) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=base_url, api_key="x", model="tiny", temperature=0, max_tokens=8, max_retries=0)


def test_langchain_invoke_and_stream(gateway, vllm):
    through, direct = _chat_openai(gateway.url + "/v1"), _chat_openai(vllm.url + "/v1")
    answer = direct.invoke("hello there my friend")
    out = through.invoke("hello there my friend")
    assert out.content == answer.content
    assert out.response_metadata.get("finish_reason") == answer.response_metadata.get("finish_reason")
    streamed = "".join(str(c.content) for c in through.stream("hello there my friend"))
    assert streamed == answer.content
