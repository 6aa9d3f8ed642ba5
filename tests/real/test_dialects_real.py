"""The dialect matrix against the real servers: every inbound dialect, whole and streamed, in
front of real vLLM (backend dialect openai) and real Triton (backend dialect triton: the
TensorRT-LLM `ensemble` and the vLLM backend's `vllm_model`).

Each answer is judged by what the real server says when asked the equivalent request directly:
greedy decoding makes vLLM's text for a prompt and a token budget a fixed thing, and the Triton
models generate a fixed sentence from the prompt (see triton_models.py). Chat requests reach
Triton through the tiny model's chat template, rendered here independently of the gateway;
token-id prompts through its tokenizer. The tests after the matrix hold the gateway to the
dialect details clients rely on (finish words, token ids and counts, one stream event per token,
headers, metadata).
"""

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from gateway import jsonutil
from gateway.app import create_app
from gateway.config import parse_config
from tests.support import sse_parse

pytestmark = pytest.mark.asyncio(loop_scope="module")

PROMPT = "The quick brown fox"  # vLLM's greedy answer to it is plain ASCII, a token a word
CHAT = [{"role": "user", "content": "hello"}]
MAX = 4
BACKENDS = ["vllm", "ensemble", "vllm_model"]
# The Triton model each Triton backend of the config calls.
TRITON_MODEL = {"ensemble": "ensemble", "vllm_model": "vllm_model"}
# Where each backend is reached, per inbound dialect (see `config`).
OPENAI_MODEL = {"vllm": "gw-tiny", "ensemble": "gw-ens", "vllm_model": "gw-tv"}
TRITON_NAME = {"vllm": "gw-tiny", "ensemble": "gw-ensemble", "vllm_model": "gw-vllm"}
DATABRICKS_NAME = {"vllm": "dbx-tiny", "ensemble": "dbx-ens", "vllm_model": "dbx-tv"}
TGI_PREFIX = {"vllm": "/tgi-vllm", "ensemble": "/tgi-ens", "vllm_model": "/tgi-tv"}
MINDIE_PREFIX = {"vllm": "/mindie-vllm", "ensemble": "/mindie-ens", "vllm_model": "/mindie-tv"}

# Each dialect's word for a neutral finish: the token limit, end of sequence, a stop string.
FINISH = {
    "openai": {"length": "length", "eos": "stop", "stop": "stop"},
    "tgi": {"length": "length", "eos": "eos_token", "stop": "stop_sequence"},
    "vllm": {"length": "length", "eos": "stop", "stop": "stop"},
}


def config(vllm_url: str, triton_url: str, tokenizer: str) -> dict[str, Any]:
    tri = {"dialect": "triton", "url": triton_url, "tokenizer": tokenizer}
    backends: dict[str, Any] = {
        # No tokenizer: whatever token ids clients get must be vLLM's own.
        "vllm": {"dialect": "openai", "url": vllm_url, "model": "tiny", "options": {"extensions": "vllm"}},
        # No model: a TGI client names none either, so vLLM is left to serve its one model.
        "vllm-anon": {"dialect": "openai", "url": vllm_url, "options": {"extensions": "vllm"}},
        "ensemble": {**tri, "model": "ensemble", "options": {"flavor": "trtllm", "count_tokens": True}},
        "vllm_model": {**tri, "model": "vllm_model", "options": {"flavor": "vllm"}},
        "missing": {**tri, "model": "no_such_model", "options": {"flavor": "trtllm"}},
        "any": {"dialect": "triton", "url": triton_url, "options": {"flavor": "trtllm"}},
    }
    routes: list[dict[str, Any]] = [
        {"name": "oai-missing", "dialect": "openai", "backend": "missing", "models": ["gw-missing"]},
        {"name": "triton-any", "dialect": "triton", "backend": "any", "prefix": "/any"},
        {"name": "tgi-anon", "dialect": "tgi", "backend": "vllm-anon", "prefix": "/tgi-anon"},
    ]
    for b in BACKENDS:
        routes += [
            {"name": f"oai-{b}", "dialect": "openai", "backend": b, "models": [OPENAI_MODEL[b]]},
            {"name": f"tgi-{b}", "dialect": "tgi", "backend": b, "prefix": TGI_PREFIX[b]},
            {"name": f"mindie-{b}", "dialect": "mindie", "backend": b, "prefix": MINDIE_PREFIX[b]},
            {"name": f"triton-{b}", "dialect": "triton", "backend": b, "models": [TRITON_NAME[b]]},
            {"name": f"dbx-{b}", "dialect": "databricks", "backend": b, "models": [DATABRICKS_NAME[b]]},
        ]
    return {"backends": backends, "routes": routes}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw(vllm, triton, tiny_model) -> AsyncIterator[TestClient]:
    client = TestClient(TestServer(create_app(parse_config(config(vllm.url, triton.url, str(tiny_model))))))
    await client.start_server()
    yield client
    await client.close()


# ---- what the real servers say, asked directly --------------------------------------------


@dataclass
class Direct:
    text: str
    finish: str  # neutral: length | eos | stop
    n: int  # tokens generated, as the server counts them
    ids: list[int] | None = None  # vLLM's own token ids
    pieces: list[str] = field(default_factory=list)  # Triton's stream events' texts


def render_chat(folder: Path, messages: list[dict[str, Any]]) -> str:
    """The prompt a chat becomes through the model's template, rendered as transformers does."""
    conf = json.loads((folder / "tokenizer_config.json").read_text())
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg: str) -> None:
        raise ValueError(msg)

    env.globals["raise_exception"] = raise_exception
    return env.from_string(conf["chat_template"]).render(
        messages=messages, add_generation_prompt=True, bos_token=conf["bos_token"], eos_token=conf["eos_token"]
    )


def prompt_ids(folder: Path) -> list[int]:
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = tok.encode(PROMPT, add_special_tokens=False).ids
    assert tok.decode(ids) == PROMPT and min(ids) > 1  # MindIE takes ids above 1
    return ids


class Oracle:
    """Direct calls to the real servers, each asked once per module."""

    def __init__(self, http: aiohttp.ClientSession, vllm_url: str, triton_url: str, folder: Path) -> None:
        self.http, self.vllm_url, self.triton_url, self.folder = http, vllm_url, triton_url, folder
        self._cache: dict[str, Direct] = {}

    async def ask(self, backend: str, kind: str, max_tokens: int = MAX, stop: list[str] | None = None) -> Direct:
        """kind: chat (CHAT), text (PROMPT) or ids (PROMPT's token ids)."""
        key = json.dumps([backend, kind, max_tokens, stop])
        if key not in self._cache:
            if backend == "vllm":
                self._cache[key] = await self._vllm(kind, max_tokens, stop)
            else:
                assert stop is None
                prompt = render_chat(self.folder, CHAT) if kind == "chat" else PROMPT
                self._cache[key] = await self._triton(backend, prompt, max_tokens)
        return self._cache[key]

    async def _vllm(self, kind: str, max_tokens: int, stop: list[str] | None) -> Direct:
        body: dict[str, Any] = {"model": "tiny", "max_tokens": max_tokens, "temperature": 0, "return_token_ids": True}
        if stop:
            body |= {"stop": stop, "include_stop_str_in_output": True}
        if kind == "chat":
            path, body["messages"] = "/v1/chat/completions", CHAT
        else:
            path, body["prompt"] = "/v1/completions", PROMPT if kind == "text" else prompt_ids(self.folder)
        async with self.http.post(self.vllm_url + path, json=body) as r:
            assert r.status == 200, await r.text()
            answer = await r.json()
        choice = answer["choices"][0]
        text = choice["message"]["content"] if kind == "chat" else choice["text"]
        finish = choice["finish_reason"]
        neutral = "length" if finish == "length" else "stop" if isinstance(choice.get("stop_reason"), str) else "eos"
        return Direct(text, neutral, answer["usage"]["completion_tokens"], choice["token_ids"])

    async def _triton(self, backend: str, prompt: str, max_tokens: int) -> Direct:
        body: dict[str, Any] = {"text_input": prompt, "stream": True, "exclude_input_in_output": True}
        if backend == "ensemble":
            body["max_tokens"] = max_tokens
        else:
            body["sampling_parameters"] = json.dumps({"max_tokens": max_tokens})
            body |= {"return_finish_reason": True, "return_num_output_tokens": True}
        async with self.http.post(
            f"{self.triton_url}/v2/models/{TRITON_MODEL[backend]}/generate_stream", json=body
        ) as r:
            assert r.status == 200, await r.text()
            events = [jsonutil.loads(e) for e in sse_parse(await r.read())[0]]
        pieces = [e["text_output"] for e in events]
        if backend == "ensemble":  # no finish reason: the sentence is longer than any budget here
            finish = "length" if len(pieces) == max_tokens else "eos"
            n = len(pieces)
        else:
            finish = "length" if events[-1]["finish_reason"] == "length" else "eos"
            n = sum(e["num_output_tokens"] for e in events)
        return Direct("".join(pieces), finish, n, None, pieces)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def oracle(http, vllm, triton, tiny_model) -> Oracle:
    return Oracle(http, vllm.url, triton.url, tiny_model)


# ---- what the client got -------------------------------------------------------------------


@dataclass
class Got:
    text: str
    finish: str | None  # in the client's words
    n: int | None = None  # the generated count the client was told
    whole: Any = None  # the parsed answer
    events: list[Any] = field(default_factory=list)  # the parsed stream events
    headers: dict[str, str] = field(default_factory=dict)


async def _post(gw: TestClient, path: str, body: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    r = await gw.post(path, json=body)
    raw = await r.read()
    assert r.status == 200, (path, r.status, raw)
    return raw, dict(r.headers)


def _events(raw: bytes) -> list[Any]:
    data, stray = sse_parse(raw)
    assert not stray, stray
    return [e.decode() if e == b"[DONE]" else jsonutil.loads(e) for e in data]


def _openai_whole(raw: bytes, chat: bool) -> Got:
    a = jsonutil.loads(raw)
    c = a["choices"][0]
    return Got(c["message"]["content"] if chat else c["text"], c["finish_reason"], a["usage"]["completion_tokens"], a)


def _openai_stream(raw: bytes, chat: bool) -> Got:
    events = _events(raw)
    assert events[-1] == "[DONE]", events[-3:]
    chunks = list(events[:-1])
    text, finish, n = "", None, None
    for ch in chunks:
        for c in ch.get("choices", []):
            text += (c["delta"].get("content") or "") if chat else c.get("text", "")
            finish = c.get("finish_reason") or finish
        if ch.get("usage"):
            n = ch["usage"]["completion_tokens"]
    return Got(text, finish, n, events=chunks)


def _tgi_whole(raw: bytes) -> Got:
    a = jsonutil.loads(raw)
    return Got(a["generated_text"], a["details"]["finish_reason"], a["details"]["generated_tokens"], a)


def _tgi_stream(raw: bytes) -> Got:
    events = _events(raw)
    last = events[-1]
    assert last.get("generated_text") is not None, events
    details = last.get("details") or {}
    return Got(last["generated_text"], details.get("finish_reason"), details.get("generated_tokens"), events=events)


def _triton_whole(raw: bytes) -> Got:
    a = jsonutil.loads(raw)
    return Got(a["text_output"], a.get("finish_reason"), a.get("num_output_tokens"), a)


def _triton_stream(raw: bytes) -> Got:
    events = _events(raw)
    counts = [e["num_output_tokens"] for e in events if "num_output_tokens" in e]
    finish = events[-1].get("finish_reason") if events else None
    return Got("".join(e["text_output"] for e in events), finish, sum(counts) if counts else None, events=events)


GREEDY = {"max_new_tokens": MAX, "do_sample": False, "details": True}


def _triton_body(backend: str, stream: bool) -> dict[str, Any]:
    """A Triton client's request in the words of the server behind the route."""
    if backend == "ensemble":  # same dialect: forwarded as it is, so in the ensemble's own inputs
        return {"text_input": PROMPT, "max_tokens": MAX, "exclude_input_in_output": True, "stream": stream}
    if backend == "vllm_model":
        return {
            "text_input": PROMPT,
            "sampling_parameters": json.dumps({"max_tokens": MAX}),
            "exclude_input_in_output": True,
            "stream": stream,
            "return_finish_reason": True,
            "return_num_output_tokens": True,
        }
    return {
        "text_input": PROMPT,
        "max_tokens": MAX,
        "temperature": 0,
        "return_finish_reason": True,
        "return_num_output_tokens": True,
    }


async def openai_chat(gw, b, o, stream=False):
    body = {"model": OPENAI_MODEL[b], "messages": CHAT, "max_tokens": MAX, "temperature": 0}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    raw, _ = await _post(gw, "/v1/chat/completions", body)
    return (_openai_stream if stream else _openai_whole)(raw, True)


async def openai_completions(gw, b, o, stream=False, ids=False):
    prompt: Any = prompt_ids(o.folder) if ids else PROMPT
    body = {"model": OPENAI_MODEL[b], "prompt": prompt, "max_tokens": MAX, "temperature": 0}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    raw, _ = await _post(gw, "/v1/completions", body)
    return (_openai_stream if stream else _openai_whole)(raw, False)


async def tgi_generate(gw, b, o, stream=False, prefix=None, stop=None):
    params = {**GREEDY, **({"stop": stop} if stop else {})}
    path = (prefix or TGI_PREFIX[b]) + ("/generate_stream" if stream else "/generate")
    raw, _ = await _post(gw, path, {"inputs": PROMPT, "parameters": params})
    return _tgi_stream(raw) if stream else _tgi_whole(raw)


async def mindie_infer(gw, b, o, stream=False, ids=False):
    body: dict[str, Any] = {"stream": stream, "parameters": GREEDY}
    body |= {"input_id": prompt_ids(o.folder)} if ids else {"inputs": PROMPT}
    raw, _ = await _post(gw, MINDIE_PREFIX[b] + ("/infer_token" if ids else "/infer"), body)
    if not stream:
        a = jsonutil.loads(raw)
        return Got(a["generated_text"], a["details"]["finish_reason"], a["details"]["generated_tokens"], a)
    events = _events(raw)
    last = events[-1]
    details = last.get("details") or {}
    return Got(last.get("generated_text"), details.get("finish_reason"), details.get("generated_tokens"), events=events)


async def triton_generate(gw, b, o, stream=False):
    path = f"/v2/models/{TRITON_NAME[b]}/" + ("generate_stream" if stream else "generate")
    raw, _ = await _post(gw, path, _triton_body(b, stream))
    return _triton_stream(raw) if stream else _triton_whole(raw)


async def databricks(gw, b, o, stream=False, chat=True):
    body: dict[str, Any] = {"max_tokens": MAX, "temperature": 0}
    body |= {"messages": CHAT} if chat else {"prompt": PROMPT}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    raw, h = await _post(gw, f"/serving-endpoints/{DATABRICKS_NAME[b]}/invocations", body)
    got = (_openai_stream if stream else _openai_whole)(raw, chat)
    got.headers = h
    return got


# name: (call, what the equivalent direct request is, the client's finish vocabulary or None)
CASES: dict[str, tuple[Callable[..., Awaitable[Got]], str, str | None]] = {
    "openai-chat": (openai_chat, "chat", "openai"),
    "openai-chat-stream": (lambda g, b, o: openai_chat(g, b, o, stream=True), "chat", "openai"),
    "openai-completions": (openai_completions, "text", "openai"),
    "openai-completions-stream": (lambda g, b, o: openai_completions(g, b, o, stream=True), "text", "openai"),
    "openai-completions-token-ids": (lambda g, b, o: openai_completions(g, b, o, ids=True), "ids", "openai"),
    "tgi-generate": (tgi_generate, "text", "tgi"),
    "tgi-generate_stream": (lambda g, b, o: tgi_generate(g, b, o, stream=True), "text", "tgi"),
    "mindie-infer": (mindie_infer, "text", "tgi"),
    "mindie-infer-stream": (lambda g, b, o: mindie_infer(g, b, o, stream=True), "text", "tgi"),
    "mindie-infer_token": (lambda g, b, o: mindie_infer(g, b, o, ids=True), "ids", "tgi"),
    "mindie-infer_token-stream": (lambda g, b, o: mindie_infer(g, b, o, stream=True, ids=True), "ids", "tgi"),
    "mindie-generate": (lambda g, b, o: tgi_generate(g, b, o, prefix=MINDIE_PREFIX[b]), "text", "tgi"),
    "mindie-generate_stream": (
        lambda g, b, o: tgi_generate(g, b, o, stream=True, prefix=MINDIE_PREFIX[b]),
        "text",
        "tgi",
    ),
    "triton-generate": (triton_generate, "text", "vllm"),
    "triton-generate_stream": (lambda g, b, o: triton_generate(g, b, o, stream=True), "text", "vllm"),
    "databricks-chat": (databricks, "chat", "openai"),
    "databricks-chat-stream": (lambda g, b, o: databricks(g, b, o, stream=True), "chat", "openai"),
    "databricks-completions": (lambda g, b, o: databricks(g, b, o, chat=False), "text", "openai"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
async def test_matrix_client_gets_what_the_server_says(gw, oracle, case, backend):
    call, kind, words = CASES[case]
    want = await oracle.ask(backend, kind)
    got = await call(gw, backend, oracle)
    assert got.text == want.text, (got.text, want.text)
    if case.startswith("triton") and backend == "ensemble":
        return  # Triton to Triton: the ensemble itself names no finish and counts nothing
    assert words is not None
    assert got.finish == FINISH[words][want.finish], (got.finish, want.finish)
    if backend == "vllm" or not case.startswith("mindie"):
        # (MindIE in front of Triton reports the ids its tokenizer finds, and counts those.)
        assert got.n == want.n, ("generated tokens", got.n, want.n)


# ---- stop strings, token ids and counts via vLLM ------------------------------------------------

STOP = ["umps"]  # vLLM's greedy answer to PROMPT is " thankParisumps thank…"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_stop_string_via_vllm_reaches_tgi_as_stop_sequence_with_the_stop_text(gw, oracle, stream):
    want = await oracle.ask("vllm", "text", max_tokens=8, stop=STOP)
    assert want.finish == "stop" and want.text.endswith("umps")  # the premise: vLLM stopped there
    got = await tgi_generate(gw, "vllm", oracle, stream=stream, stop=STOP)
    assert (got.text, got.finish) == (want.text, "stop_sequence")  # TGI keeps the stop text
    assert got.n == want.n


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_stop_string_via_vllm_reaches_mindie_as_stop_sequence(gw, oracle, stream):
    want = await oracle.ask("vllm", "text", max_tokens=8, stop=STOP)
    got = await tgi_generate(gw, "vllm", oracle, stream=stream, prefix=MINDIE_PREFIX["vllm"], stop=STOP)
    assert got.finish == "stop_sequence", got
    assert got.text in (want.text, want.text.removesuffix("umps"))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_tgi_to_a_backend_with_no_model_gets_vllms_one_model(gw, oracle, stream):
    # Neither the TGI client nor the backend's config names a model: the upstream body leaves
    # the field out (not `"model": null`) and vLLM answers with the model it serves.
    want = await oracle.ask("vllm", "text")
    got = await tgi_generate(gw, "vllm", oracle, stream=stream, prefix="/tgi-anon")
    assert (got.text, got.n) == (want.text, want.n)


async def test_tgi_details_tokens_are_vllms_token_ids(gw, oracle):
    want = await oracle.ask("vllm", "text")
    got = await tgi_generate(gw, "vllm", oracle)
    details = got.whole["details"]
    assert details["generated_tokens"] == want.n
    assert [t["id"] for t in details["tokens"]] == want.ids, details["tokens"]
    assert "".join(t["text"] for t in details["tokens"]) == want.text
    assert all(t["special"] is False for t in details["tokens"])


@pytest.mark.parametrize("prefix", [TGI_PREFIX["vllm"], MINDIE_PREFIX["vllm"]], ids=["tgi", "mindie"])
async def test_tgi_style_stream_has_one_event_per_vllm_token_with_its_id(gw, oracle, prefix):
    want = await oracle.ask("vllm", "text")
    got = await tgi_generate(gw, "vllm", oracle, stream=True, prefix=prefix)
    assert [e["token"]["id"] for e in got.events] == want.ids, got.events
    assert "".join(e["token"]["text"] for e in got.events) == want.text
    assert got.n == want.n


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ids", [False, True], ids=["infer", "infer_token"])
async def test_mindie_infer_counts_the_ids_it_reports(gw, oracle, backend, ids):
    got = await mindie_infer(gw, backend, oracle, ids=ids)
    details = got.whole["details"]
    if backend == "vllm":
        want = await oracle.ask("vllm", "ids" if ids else "text")
        assert details.get("generated_token_ids") == want.ids, details
        assert details["generated_tokens"] == want.n == len(want.ids)
    else:
        # Triton says how many tokens it generated but not which: the ids are the tokenizer's
        # reading of the text. The test models generate a word per step, which the real
        # tokenizer reads as several ids, so only the server's count is checked.
        want = await oracle.ask(backend, "text")
        assert details["generated_tokens"] == want.n, details
        assert details["generated_token_ids"], details


async def test_mindie_tgi_style_generate_details_tokens_have_text(gw, oracle):
    want = await oracle.ask("vllm", "text")
    got = await tgi_generate(gw, "vllm", oracle, prefix=MINDIE_PREFIX["vllm"])
    tokens = got.whole["details"]["tokens"]
    assert [t["id"] for t in tokens] == want.ids, tokens
    assert all(t["text"] is not None and t["special"] is not None for t in tokens), tokens
    assert "".join(t["text"] for t in tokens) == want.text


async def test_tgi_without_do_sample_decodes_greedily_as_tgi_does(gw, oracle):
    """TGI samples only when told (`do_sample` defaults to false): a bare request is greedy."""
    want = await oracle.ask("vllm", "text")
    raw, _ = await _post(
        gw, TGI_PREFIX["vllm"] + "/generate", {"inputs": PROMPT, "parameters": {"max_new_tokens": MAX}}
    )
    assert jsonutil.loads(raw)["generated_text"] == want.text


# ---- streams in front of Triton: one event per generated token ---------------------------------


def _flat(token_id: Any) -> list[Any]:
    return token_id if isinstance(token_id, list) else [token_id]


@pytest.mark.parametrize("backend", ["ensemble", "vllm_model"])
@pytest.mark.parametrize("route", ["tgi-generate_stream", "mindie-generate_stream", "mindie-infer-stream"])
async def test_stream_in_front_of_triton_has_one_event_per_generated_token(gw, oracle, backend, route):
    want = await oracle.ask(backend, "text")
    if route == "mindie-infer-stream":
        got = await mindie_infer(gw, backend, oracle, stream=True)
    else:
        prefix = TGI_PREFIX[backend] if route.startswith("tgi") else MINDIE_PREFIX[backend]
        got = await tgi_generate(gw, backend, oracle, stream=True, prefix=prefix)
    events = got.events
    assert len(events) == len(want.pieces), [e["token"] for e in events]
    for e in events:
        assert e["token"]["id"] is not None and None not in _flat(e["token"]["id"]), e
    # Every event but the last is a plain token; the last carries the last token and the finish.
    assert all(e.get("generated_text") is None for e in events[:-1]), events
    assert events[-1]["generated_text"] == want.text
    assert events[-1]["details"]["finish_reason"] == FINISH["tgi"][want.finish]
    texts = [e["token"]["text"] for e in events]
    if route == "mindie-infer-stream":  # MindIE's final event names its token by id, its text null
        assert texts[:-1] == want.pieces[:-1]
    else:
        assert texts == want.pieces
        if route.startswith("tgi"):
            assert [e["index"] for e in events] == list(range(1, len(events) + 1))


# ---- reasoning ------------------------------------------------------------------------------


async def test_reasoning_reaches_openai_style_clients(gw, http, vllm):
    body = {"model": "tiny", "messages": CHAT, "max_tokens": 8, "temperature": 0}
    async with http.post(vllm.url + "/v1/chat/completions", json=body) as r:
        message = (await r.json())["choices"][0]["message"]
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if not reasoning:
        pytest.skip("vLLM serves the tiny model without a reasoning parser: it answers no reasoning to compare")
    raw, _ = await _post(gw, MINDIE_PREFIX["vllm"] + "/v1/chat/completions", {**body, "model": "tiny"})
    assert jsonutil.loads(raw)["choices"][0]["message"].get("reasoning_content") == reasoning


# ---- Databricks ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_databricks_chat_says_chat_completion_and_served_model_name(gw, oracle, backend):
    got = await databricks(gw, backend, oracle)
    assert got.whole["object"] == "chat.completion"
    served = {k.lower(): v for k, v in got.headers.items()}.get("served-model-name")
    assert served, got.headers
    assert served in ("tiny", TRITON_MODEL.get(backend), DATABRICKS_NAME[backend]), served
    stream = await databricks(gw, backend, oracle, stream=True)
    assert {c["object"] for c in stream.events} == {"chat.completion.chunk"}


# ---- OpenAI client, Triton without the model ---------------------------------------------------


async def test_openai_client_on_a_triton_model_triton_lacks_gets_502(gw):
    body = {"model": "gw-missing", "messages": CHAT, "max_tokens": 2}
    r = await gw.post("/v1/chat/completions", json=body)
    answer = await r.json()
    assert r.status == 502, (r.status, answer)
    assert "no_such_model" in answer["error"]["message"], answer


# ---- Triton metadata and health in front of real Triton -------------------------------------


@pytest.mark.parametrize("model", ["ensemble", "vllm_model"])
@pytest.mark.parametrize("tail", ["", "/config"], ids=["metadata", "config"])
async def test_triton_model_metadata_and_config_are_the_backends_renamed(gw, http, triton, model, tail):
    async with http.get(f"{triton.url}/v2/models/{model}{tail}") as r:
        assert r.status == 200
        direct = await r.json()
    exposed = TRITON_NAME[model]
    r = await gw.get(f"/v2/models/{exposed}{tail}")
    assert r.status == 200, await r.text()
    got = await r.json()
    assert got == {**direct, "name": exposed}


async def test_triton_server_metadata(gw, http, triton):
    async with http.get(triton.url + "/v2") as r:
        direct = await r.json()
    r = await gw.get("/v2")
    assert r.status == 200, await r.text()
    got = await r.json()
    assert isinstance(got.get("name"), str) and isinstance(got.get("version"), str), got
    assert isinstance(got.get("extensions"), list), got
    assert set(got) >= set(direct) - {"extensions"}


@pytest.mark.parametrize("prefix", ["", "/any"], ids=["routes-with-models", "route-for-any-model"])
async def test_triton_unknown_model_is_not_ready(gw, http, triton, prefix):
    async with http.get(triton.url + "/v2/models/unknown/ready") as r:
        assert r.status == 400  # the premise: what Triton itself says
    r = await gw.get(prefix + "/v2/models/unknown/ready")
    assert r.status == 400, (r.status, await r.text())
    known = "/any/v2/models/ensemble/ready" if prefix else f"/v2/models/{TRITON_NAME['ensemble']}/ready"
    r = await gw.get(known)
    assert r.status == 200
