"""A same-dialect route is transparent, judged against the real servers.

What the client sends reaches the backend unchanged but for the model name (the route exposes
`gw-…` names, the backend knows `tiny`, `ensemble`, `vllm_model`) and the credentials; what the
backend answers reaches the client unchanged but for the model name, the gateway's own response
headers and usage the client did not ask for. Each gateway answer is compared with the answer the
real server gives to the same request sent directly: byte for byte for OpenAI (after normalising
only what differs between two calls of one request: `id`, `created`, and the renamed model), value
for value for Triton.
"""

import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway import jsonutil
from gateway.app import create_app
from gateway.config import parse_config
from tests.support import sse_parse

pytestmark = pytest.mark.asyncio(loop_scope="module")

CLIENT_KEY = "client-secret-key"
BACKEND_KEY = "backend-secret-token"
AUTH = {"Authorization": f"Bearer {CLIENT_KEY}"}
MODEL = "gw-tiny"  # what the client says; vLLM serves "tiny"
# Triton models that fail: raising (plain and decoupled) and giving several responses.
FAILING = ("failing", "failing_decoupled", "several")
RAISED = "ValueError: the model failed on purpose"
CHAT = [{"role": "user", "content": "hello"}]
PROMPT = "The quick brown fox"


# ---- the servers ------------------------------------------------------------------------------


class Tee:
    """A recording hop between the gateway and vLLM: it keeps what vLLM was sent and relays
    vLLM's answer chunk by chunk, unchanged (status, content type, body)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.url = ""
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.session: aiohttp.ClientSession | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append((request.method, request.path_qs, dict(request.headers), body))
        assert self.session is not None
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with self.session.request(
            request.method, self.target + request.path_qs, data=body or None, headers=headers
        ) as up:
            resp = web.StreamResponse(status=up.status)
            resp.headers["Content-Type"] = up.headers.get("Content-Type", "application/octet-stream")
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tee(vllm, http) -> AsyncIterator[Tee]:
    t = Tee(vllm.url)
    t.session = http
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", t.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    t.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield t
    await runner.cleanup()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw(tee, triton) -> AsyncIterator[TestClient]:
    config = {
        "auth": {"api_keys": [CLIENT_KEY]},
        "backends": {
            "vllm": {
                "dialect": "openai",
                "url": tee.url,
                "model": "tiny",
                "headers": {"Authorization": f"Bearer {BACKEND_KEY}"},
                "options": {"extensions": "vllm"},
            },
            "ens": {"dialect": "triton", "url": triton.url, "model": "ensemble", "options": {"flavor": "trtllm"}},
            "tv": {"dialect": "triton", "url": triton.url, "model": "vllm_model", "options": {"flavor": "vllm"}},
            **{
                model: {"dialect": "triton", "url": triton.url, "model": model, "options": {"flavor": "trtllm"}}
                for model in FAILING
            },
        },
        "routes": [
            {"name": "oai", "dialect": "openai", "backend": "vllm", "models": [MODEL]},
            {"name": "ens", "dialect": "triton", "backend": "ens", "models": ["gw-ensemble"]},
            {"name": "tv", "dialect": "triton", "backend": "tv", "models": ["gw-vllm"]},
            *({"name": f"t-{m}", "dialect": "triton", "backend": m, "models": [f"gw-{m}"]} for m in FAILING),
            *({"name": f"o-{m}", "dialect": "openai", "backend": m, "models": [f"oai-{m}"]} for m in FAILING),
        ],
    }
    client = TestClient(TestServer(create_app(parse_config(config))))
    await client.start_server()
    yield client
    await client.close()


# ---- OpenAI: byte for byte ------------------------------------------------------------------

_ID = re.compile(rb'"id":"(chatcmpl|cmpl)-[^"]*"')
_CREATED = re.compile(rb'"created":\d+')


def normal(body: bytes) -> bytes:
    """What may differ between two calls of one request, made the same: ids, times, the renamed model."""
    body = body.replace(f'"model":"{MODEL}"'.encode(), b'"model":"tiny"')
    body = _ID.sub(rb'"id":"\1-ID"', body)
    return _CREATED.sub(b'"created":0', body)


async def _direct(http: aiohttp.ClientSession, url: str, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    async with http.post(url + path, json={**body, "model": "tiny"}) as r:
        return r.status, r.content_type, await r.read()


async def _through(gw: TestClient, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    r = await gw.post(path, json=body, headers=AUTH)
    return r.status, r.content_type, await r.read()


async def same_as_direct(
    gw: TestClient, http: aiohttp.ClientSession, vllm_url: str, path: str, body: dict[str, Any]
) -> bytes:
    """The gateway's answer to `body` (model gw-tiny) and vLLM's own to the same request (model
    tiny) are the same bytes, once ids and times are set aside. Greedy decoding is deterministic,
    but a CPU server batching someone else's request at the same moment may move a float's last
    digit: a mismatch is tried again, a gateway fault is not that shy."""
    body = {**body, "model": MODEL}
    for _ in range(3):
        d_status, d_type, d_body = await _direct(http, vllm_url, path, body)
        g_status, g_type, g_body = await _through(gw, path, body)
        if (g_status, g_type, normal(g_body)) == (d_status, d_type, normal(d_body)):
            break
    assert g_status == d_status, (g_status, g_body, d_body)
    assert g_type == d_type
    assert normal(g_body) == normal(d_body), f"\ngateway: {g_body!r}\ndirect:  {d_body!r}"
    return g_body


CHAT_CASES = {
    "plain": {"messages": CHAT, "max_tokens": 4, "temperature": 0},
    "logprobs": {"messages": CHAT, "max_tokens": 3, "temperature": 0, "logprobs": True, "top_logprobs": 2},
    "stop-and-seed": {"messages": CHAT, "max_tokens": 6, "temperature": 0, "stop": ["tW"], "seed": 7},
    "vllm-extras": {
        "messages": CHAT,
        "max_tokens": 3,
        "temperature": 0,
        "return_token_ids": True,
        "top_k": 5,
        "repetition_penalty": 1.0,
    },
}
COMPLETION_CASES = {
    "plain": {"prompt": PROMPT, "max_tokens": 4, "temperature": 0},
    "logprobs": {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "logprobs": 2},
    # Past the public API's 5: vLLM takes up to its --max-logprobs (20), and is the judge.
    "logprobs-past-5": {"prompt": PROMPT, "max_tokens": 2, "temperature": 0, "logprobs": 12},
    "echo-token-ids": {"prompt": [494, 526, 540, 471], "max_tokens": 3, "temperature": 0, "echo": True},
    "stop-kept": {
        "prompt": PROMPT,
        "max_tokens": 8,
        "temperature": 0,
        "stop": ["umps"],
        "include_stop_str_in_output": True,
    },
}
STREAM_OPTIONS: dict[str, dict[str, Any] | None] = {
    "no-stream-options": None,
    "include-usage": {"include_usage": True},
    "no-usage": {"include_usage": False},
    "continuous-usage": {"include_usage": True, "continuous_usage_stats": True},
    "continuous-without-usage": {"include_usage": False, "continuous_usage_stats": True},
    "continuous-alone": {"continuous_usage_stats": True},
}


def _streamed(body: dict[str, Any], options: dict[str, Any] | None) -> dict[str, Any]:
    out = {**body, "stream": True}
    if options is not None:
        out["stream_options"] = options
    return out


@pytest.mark.parametrize("case", list(CHAT_CASES))
async def test_openai_chat_whole_is_vllms_answer(gw, http, vllm, case):
    await same_as_direct(gw, http, vllm.url, "/v1/chat/completions", CHAT_CASES[case])


@pytest.mark.parametrize("case", list(COMPLETION_CASES))
async def test_openai_completions_whole_is_vllms_answer(gw, http, vllm, case):
    await same_as_direct(gw, http, vllm.url, "/v1/completions", COMPLETION_CASES[case])


@pytest.mark.parametrize("options", list(STREAM_OPTIONS))
async def test_openai_chat_stream_is_vllms_stream(gw, http, vllm, options):
    body = _streamed(CHAT_CASES["plain"], STREAM_OPTIONS[options])
    await same_as_direct(gw, http, vllm.url, "/v1/chat/completions", body)


@pytest.mark.parametrize("options", list(STREAM_OPTIONS))
async def test_openai_completions_stream_is_vllms_stream(gw, http, vllm, options):
    body = _streamed(COMPLETION_CASES["plain"], STREAM_OPTIONS[options])
    await same_as_direct(gw, http, vllm.url, "/v1/completions", body)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_openai_stream_with_logprobs_is_vllms_stream(gw, http, vllm, path):
    body = dict(CHAT_CASES["logprobs"] if "chat" in path else COMPLETION_CASES["logprobs"])
    await same_as_direct(gw, http, vllm.url, path, _streamed(body, {"include_usage": True}))
    await same_as_direct(gw, http, vllm.url, path, _streamed(body, None))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_openai_answers_name_the_clients_model(gw, path, stream):
    """The route exposes gw-tiny for vLLM's tiny: every answer and chunk names gw-tiny."""
    body = dict(CHAT_CASES["plain"] if "chat" in path else COMPLETION_CASES["plain"])
    body = _streamed(body, {"include_usage": True}) if stream else body
    status, _, raw = await _through(gw, path, {**body, "model": MODEL})
    assert status == 200, raw
    objects = [jsonutil.loads(e) for e in sse_parse(raw)[0] if e != b"[DONE]"] if stream else [jsonutil.loads(raw)]
    assert objects
    assert {o.get("model") for o in objects} == {MODEL}, [o.get("model") for o in objects]


ERROR_CASES = {
    # vLLM refuses these itself; the gateway's own validation has no rule against them.
    "max-tokens-over-context": {"max_tokens": 5000, "temperature": 0},
    "min-tokens-over-max": {"max_tokens": 4, "min_tokens": 10, "temperature": 0},
    "bad-vllm-param": {"max_tokens": 4, "prompt_logprobs": -2, "temperature": 0},
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("case", list(ERROR_CASES))
async def test_openai_backend_errors_are_forwarded_as_they_are(gw, http, vllm, case, path, stream):
    body = {**ERROR_CASES[case], **({"messages": CHAT} if "chat" in path else {"prompt": PROMPT})}
    if stream:
        body["stream"] = True
    d_status, _, d_body = await _direct(http, vllm.url, path, body)
    assert d_status == 400, d_body  # the premise: vLLM refuses it
    g_status, g_type, g_body = await _through(gw, path, {**body, "model": MODEL})
    assert g_status == d_status, g_body
    assert g_type == "application/json"
    got, want = jsonutil.loads(g_body), jsonutil.loads(d_body)
    for key in ("type", "code", "param", "message"):
        assert got["error"].get(key) == want["error"][key], (key, got, want)
    assert normal(g_body) == normal(d_body)


async def test_openai_request_reaches_vllm_unchanged_but_for_model_and_credentials(gw, tee):
    body = {
        "model": MODEL,
        "messages": CHAT,
        "max_tokens": 2,
        "temperature": 0,
        "top_k": 3,
        "some_future_field": {"kept": [1, 2.5, None]},
        "user": "u-1",
    }
    tee.seen.clear()
    r = await gw.post("/v1/chat/completions", json=body, headers=AUTH)
    assert r.status == 200, await r.text()
    [(method, path, headers, sent)] = tee.seen
    assert (method, path) == ("POST", "/v1/chat/completions")
    assert jsonutil.loads(sent) == {**body, "model": "tiny"}
    assert headers.get("Authorization") == f"Bearer {BACKEND_KEY}"
    assert CLIENT_KEY not in str(headers)

    # A stream: the gateway may ask for usage for itself, nothing else changes.
    tee.seen.clear()
    r = await gw.post(
        "/v1/completions", json={**COMPLETION_CASES["plain"], "model": MODEL, "stream": True}, headers=AUTH
    )
    assert r.status == 200
    await r.read()
    [(_, path, headers, sent)] = tee.seen
    sent_body = jsonutil.loads(sent)
    options = sent_body.pop("stream_options", None)
    assert options in (None, {"include_usage": True})
    assert sent_body == {**COMPLETION_CASES["plain"], "model": "tiny", "stream": True}
    assert CLIENT_KEY not in str(headers)


async def test_openai_models_list_is_vllms_renamed(gw, http, vllm):
    async with http.get(vllm.url + "/v1/models") as r:
        direct = await r.json()
    r = await gw.get("/v1/models", headers=AUTH)
    assert r.status == 200
    got = await r.json()
    assert got["object"] == "list"
    [entry] = [m for m in got["data"] if m["id"] == MODEL]
    [want] = [m for m in direct["data"] if m["id"] == "tiny"]
    assert "tiny" not in [m["id"] for m in got["data"]]
    for key in ("object", "owned_by", "root", "parent", "max_model_len"):
        assert entry.get(key) == want[key], (key, entry, want)
    assert set(entry) >= set(want) - {"permission"}, (entry, want)


# ---- Triton: every output kept, values unchanged, model_name rewritten ------------------------


def _renamed(obj: Any, name: str) -> Any:
    if isinstance(obj, dict) and "model_name" in obj:
        return {**obj, "model_name": name}
    return obj


def _triton_body(content_type: str, raw: bytes) -> Any:
    if content_type == "text/event-stream":
        return [jsonutil.loads(e) for e in sse_parse(raw)[0]]
    return jsonutil.loads(raw)


async def _triton_direct(http: aiohttp.ClientSession, url: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with http.post(url + path, json=body) as r:
        return r.status, _triton_body(r.content_type, await r.read())


async def _triton_through(gw: TestClient, path: str, body: dict[str, Any], media: str | None = None) -> tuple[int, Any]:
    r = await gw.post(path, json=body, headers=AUTH)
    raw = await r.read()
    if media is not None:
        assert r.content_type == media, (r.content_type, raw)
    return r.status, _triton_body(r.content_type, raw)


TRITON_CASES = {
    "ensemble-plain": ("ensemble", {"text_input": "hello there", "max_tokens": 4}),
    "ensemble-logprobs": (
        "ensemble",
        {"text_input": "hello there", "max_tokens": 4, "return_log_probs": True, "exclude_input_in_output": True},
    ),
    "ensemble-stop-words-and-id": (
        "ensemble",
        {"id": "req-7", "text_input": "hello there", "max_tokens": 8, "stop_words": ["gateway"], "temperature": 0.5},
    ),
    "ensemble-parameters-object": (
        "ensemble",
        {"text_input": "one two", "parameters": {"max_tokens": 3, "exclude_input_in_output": True}},
    ),
    "vllm-sampling-parameters": (
        "vllm_model",
        {
            "text_input": "hello there",
            "sampling_parameters": jsonutil.dumps({"max_tokens": 5, "stop": ["there"]}).decode(),
            "return_finish_reason": True,
            "return_num_input_tokens": True,
            "return_num_output_tokens": True,
        },
    ),
    "vllm-plain": ("vllm_model", {"text_input": "hello there", "exclude_input_in_output": True}),
}
EXPOSED = {"ensemble": "gw-ensemble", "vllm_model": "gw-vllm"}


@pytest.mark.parametrize("case", list(TRITON_CASES))
async def test_triton_generate_is_tritons_answer(gw, http, triton, case):
    model, body = TRITON_CASES[case]
    status, direct = await _triton_direct(http, triton.url, f"/v2/models/{model}/generate", body)
    assert status == 200 and "error" not in direct, direct  # the premise
    g_status, got = await _triton_through(gw, f"/v2/models/{EXPOSED[model]}/generate", body, "application/json")
    assert g_status == 200, got
    assert got == _renamed(direct, EXPOSED[model])


@pytest.mark.parametrize("case", list(TRITON_CASES))
async def test_triton_generate_stream_is_tritons_stream(gw, http, triton, case):
    model, body = TRITON_CASES[case]
    body = {**body, "stream": True}  # decoupled models stream only when told
    status, direct = await _triton_direct(http, triton.url, f"/v2/models/{model}/generate_stream", body)
    assert status == 200 and direct and all("error" not in e for e in direct), direct
    path = f"/v2/models/{EXPOSED[model]}/generate_stream"
    g_status, got = await _triton_through(gw, path, body, "text/event-stream")
    assert g_status == 200, got
    assert got == [_renamed(e, EXPOSED[model]) for e in direct]


@pytest.mark.parametrize(
    ("model", "body"),
    [
        ("ensemble", {"text_input": "hello there", "max_tokens": 4, "stream": True}),
        ("several", {"text_input": "hello there"}),
    ],
)
async def test_triton_error_in_a_200_answer_is_a_400_with_tritons_body(gw, http, triton, model, body):
    status, direct = await _triton_direct(http, triton.url, f"/v2/models/{model}/generate", body)
    # Triton itself answers 200 with an error: a decoupled model gives more than one response.
    assert status == 200 and "error" in direct, direct
    # Its generate extension has a failed request answer 400 with {"error"}: Triton's own words.
    assert await _triton_through(gw, f"/v2/models/gw-{model}/generate", body) == (400, direct)


async def test_several_responses_to_a_generate_the_gateway_asked_for_are_a_backend_failure(gw, http, triton):
    status, direct = await _triton_direct(http, triton.url, "/v2/models/several/generate", {"text_input": "hi"})
    assert status == 200 and "error" in direct, direct
    r = await gw.post("/v1/completions", json={"model": "oai-several", "prompt": "hi"}, headers=AUTH)
    assert r.status == 502
    assert (await r.json())["error"]["message"] == f"backend error in a 200 answer: {direct['error']}"


@pytest.mark.parametrize("model", ["failing", "failing_decoupled"])
@pytest.mark.parametrize("path", ["generate", "generate_stream"])
async def test_a_triton_model_that_raised_reaches_a_triton_client_as_triton_said_it(gw, http, triton, model, path):
    """Also a stream that fails before its first event: Triton's status and its one error event."""
    async with http.post(f"{triton.url}/v2/models/{model}/{path}", json={"text_input": "hi"}) as r:
        direct = (r.status, r.content_type, await r.read())
    assert direct[0] == 400 and RAISED.encode() in direct[2], direct
    r = await gw.post(f"/v2/models/gw-{model}/{path}", json={"text_input": "hi"}, headers=AUTH)
    assert (r.status, r.content_type, await r.read()) == direct


@pytest.mark.parametrize("model", ["failing", "failing_decoupled"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_triton_model_that_raised_is_named_to_an_openai_client(gw, http, triton, model, stream):
    body = {"model": f"oai-{model}", "prompt": "hi", "max_tokens": 4, "stream": stream}
    r = await gw.post("/v1/completions", json=body, headers=AUTH)
    assert r.status == 400  # Triton's status for a model that raised
    message = (await r.json())["error"]["message"]
    assert len(message) <= 512 and " […] " in message
    # The exception's line is kept: the last line of a decoupled model's error, followed by where
    # the Python backend called the model for the other.
    assert message.endswith(RAISED) if model == "failing_decoupled" else f"{RAISED}    At: " in message


async def test_triton_version_path_is_forwarded(gw, http, triton):
    body = {"text_input": "hello there", "max_tokens": 3}
    status, direct = await _triton_direct(http, triton.url, "/v2/models/ensemble/versions/1/generate", body)
    assert status == 200, direct
    g_status, got = await _triton_through(gw, "/v2/models/gw-ensemble/versions/1/generate", body)
    assert (g_status, got) == (200, _renamed(direct, "gw-ensemble"))

    # A version the server does not have: Triton's own 404 and message.
    status, direct = await _triton_direct(http, triton.url, "/v2/models/ensemble/versions/7/generate", body)
    assert status == 404, direct
    g_status, got = await _triton_through(gw, "/v2/models/gw-ensemble/versions/7/generate", body)
    assert g_status == 404, (g_status, got)
    assert "version 7" in got.get("error", ""), got


async def test_triton_refusal_on_a_stream_is_tritons_400(gw, http, triton):
    # The vLLM backend refuses to stream the prompt back: Triton answers 400 before any token.
    body = {"text_input": "hello there", "stream": True, "exclude_input_in_output": False}
    status, direct = await _triton_direct(http, triton.url, "/v2/models/vllm_model/generate_stream", body)
    assert status == 400, direct
    r = await gw.post("/v2/models/gw-vllm/generate_stream", json=body, headers=AUTH)
    raw = await r.read()
    assert r.status == 400, (r.status, raw)
    # Triton's own body (one SSE error event), or the gateway's {"error"}: either, as its type says.
    try:
        got = _triton_body(r.content_type, raw)
    except ValueError:
        pytest.fail(f"the body does not parse as its Content-Type ({r.content_type}) says: {raw[:80]!r}")
    error = got[0] if isinstance(got, list) and got else got
    assert isinstance(error, dict) and isinstance(error.get("error"), str) and error["error"], got
