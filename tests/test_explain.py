"""`gateway explain`: what the gateway would do with a client request, told without sending it,
and never at odds with what the gateway really sends for the same request."""

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway import jsonutil
from gateway.config import Config, parse_config
from gateway.dialects import registry
from gateway.explain import ExplainError, Explanation, as_json, explain, render_text
from gateway.redact import REDACTED
from tests.plugin_dialect import DIALECT as PLAIN
from tests.support import FakeUpstream

ROOT = Path(__file__).resolve().parent.parent
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
SECRET = "sk-explain-0123456789abcdef"
# One request per client dialect, at the path its clients call, for the dialect-pair checks.
CLIENTS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai": ("/v1/chat/completions", {**CHAT, "max_tokens": 5, "temperature": 0.5, "stop": ["\n\n"]}),
    "tgi": ("/generate", {"inputs": "hi", "parameters": {"max_new_tokens": 5, "temperature": 0.5, "stop": ["\n\n"]}}),
    "mindie": ("/infer", {"inputs": "hi", "parameters": {"max_new_tokens": 5, "temperature": 0.5}}),
    "triton": ("/v2/models/m/generate", {"text_input": "hi", "max_tokens": 5, "temperature": 0.5}),
    "databricks": (
        "/serving-endpoints/m/invocations",
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0.5},
    ),
    "anthropic": ("/v1/messages", {**CHAT, "max_tokens": 5, "temperature": 0.5, "stop_sequences": ["\n\n"]}),
}


def config(client: str, backend: str, url: str = "http://127.0.0.1:9", **conf: Any) -> dict[str, Any]:
    b = {"dialect": backend, "url": url, **conf}
    return {"backends": {"up": b}, "routes": [{"name": "r", "dialect": client, "backend": "up"}]}


async def explained(conf: dict[str, Any], body: Any, path: str | None = None, **kw: Any) -> Explanation:
    return await explain(parse_config(conf), "r", path, jsonutil.dumps(body), **kw)


def fate(e: Explanation, name: str) -> tuple[str, tuple[str, ...], str]:
    p = next(p for p in e.params if p.name == name)
    return p.fate, p.wire, p.why


# ---- what each parameter becomes --------------------------------------------------------------


async def test_top_k_to_a_public_openai_backend_is_dropped_and_named_with_why():
    # A Databricks client's chat is translated for an OpenAI backend: the policy applies.
    body = {"messages": [{"role": "user", "content": "hi"}], "top_k": 5, "stop": ["\n\n"], "max_tokens": 9}
    e = await explained(config("databricks", "openai", model="gpt-x"), body, "/serving-endpoints/m/invocations")
    assert fate(e, "top_k") == (
        "drop",
        (),
        "the backend's dialect has no such field; a sampling hint, so the request goes on without it "
        "and the answer names it in X-Gateway-Dropped-Params",
    )
    assert fate(e, "stop")[:2] == ("map", ("stop",))
    assert fate(e, "max_tokens")[:2] == ("map", ("max_completion_tokens",))
    assert e.dropped == "top_k" and e.stops is None and not e.passthrough
    assert b'"top_k"' not in (e.upstream[0].body or b"")
    text = render_text(e)
    assert "top_k" in text and "drop: the backend's dialect has no such field" in text
    assert "the answer carries X-Gateway-Dropped-Params: top_k" in text


async def test_an_openai_clients_top_k_to_a_public_openai_backend_is_dropped_from_the_forwarded_body():
    # Same wire: a pass-through, yet the public API has no top_k (it would refuse the request),
    # so its field is taken out, and said so; what the backend takes goes as sent.
    body = {**CHAT, "top_k": 5, "stop": ["\n\n"]}
    e = await explained(config("openai", "openai", model="gpt-x"), body)
    assert e.passthrough and e.dropped == "top_k" and e.stops is None
    kind, _, why = fate(e, "top_k")
    assert kind == "drop" and "taken out of the body forwarded" in why
    assert fate(e, "stop")[0] == "forward" and "no such field" not in fate(e, "stop")[2]
    sent = {k: v for k, v in body.items() if k != "top_k"}
    assert jsonutil.loads(e.upstream[0].body or b"") == {**sent, "model": "gpt-x"}


async def test_a_mindie_backend_takes_a_completion_without_openai_only_fields_on_infer(tokenizer_folder):
    conf = config("openai", "mindie", tokenizer=tokenizer_folder)
    e = await explained(conf, {"model": "m", "prompt": "hi", "top_k": 5, "max_tokens": 9}, "/v1/completions")
    assert e.upstream[0].target == "/infer"
    assert fate(e, "top_k")[:2] == ("map", ("parameters.top_k",))
    assert fate(e, "max_tokens")[:2] == ("map", ("parameters.max_new_tokens",))
    # Stop strings are a field only MindIE's OpenAI route has: the completion goes there, and
    # the backend stops at them itself.
    e = await explained(conf, {"model": "m", "prompt": "hi", "top_k": 5, "stop": ["\n\n"]}, "/v1/completions")
    assert e.upstream[0].target == "/v1/completions"
    assert fate(e, "stop")[:2] == ("map", ("stop",)) and e.stops is None


async def test_stop_strings_the_backend_cannot_honour_are_the_gateways(tokenizer_folder):
    conf = config("openai", "tgi", tokenizer=tokenizer_folder)
    e = await explained(conf, {**CHAT, "top_k": 5, "stop": ["\n\n", "END"]})
    assert e.stops == ("\n\n", "END") and not e.include_stop
    assert fate(e, "stop") == (
        "emulate",
        ("parameters.stop",),
        "the gateway cuts the text at the stop strings (and sends it as parameters.stop)",
    )
    assert 'stop strings the gateway enforces: "\\n\\n", "END" (the stop text is cut from the output)' in render_text(e)
    # A public-API backend stops at strings but cannot keep them: a client that wants the stop
    # text kept has the gateway cut instead, and the backend is not told.
    body = {"inputs": "hi", "parameters": {"stop": ["END"], "top_k": 5}}
    e = await explained(config("tgi", "openai", model="gpt-x"), body, "/generate")
    assert e.stops == ("END",) and e.include_stop
    assert fate(e, "stop")[:2] == ("emulate", ())
    assert "stop" not in jsonutil.loads(e.upstream[0].body or b"")


async def test_a_tgi_client_to_an_openai_backend_is_translated_to_a_completion():
    body = {"inputs": "hi", "parameters": {"top_k": 5, "repetition_penalty": 1.1, "max_new_tokens": 9}}
    e = await explained(config("tgi", "openai", model="up"), body, "/generate")
    assert (e.upstream[0].method, e.upstream[0].target) == ("POST", "/v1/completions")
    assert jsonutil.loads(e.upstream[0].body or b"") == {"model": "up", "prompt": "hi", "max_tokens": 9}
    assert fate(e, "max_tokens")[:2] == ("map", ("max_tokens",))
    assert fate(e, "top_k")[0] == fate(e, "repetition_penalty")[0] == "drop"
    assert e.dropped == "repetition_penalty,top_k"


async def test_a_refused_parameter_shows_the_clients_400_exactly(upstream, make_gateway):
    conf = config("openai", "tgi", upstream.url)
    body = {"model": "m", "prompt": "hi", "logprobs": 2}
    gw = await make_gateway(conf)
    resp = await gw.post("/v1/completions", json=body)
    e = await explained(conf, body, "/v1/completions")
    assert e.error is not None
    assert (e.error.status, e.error.content_type, e.error.body) == (
        resp.status,
        resp.headers["Content-Type"],
        await resp.read(),
    )
    assert e.error.status == 400 and upstream.requests == [] and e.upstream == ()
    assert fate(e, "logprobs")[0] == "refuse" and "the request is refused" in fate(e, "logprobs")[2]
    assert "refused: the client gets 400 (application/json):" in render_text(e)


async def test_a_request_that_is_not_valid_gets_the_clients_error_in_its_dialect(upstream, make_gateway):
    conf = config("tgi", "openai", upstream.url)
    gw = await make_gateway(conf)
    for body in (b"{not json", b'{"inputs": 5}', b"[]"):
        resp = await gw.post("/generate", data=body, headers={"Content-Type": "application/json"})
        e = await explain(parse_config(conf), "r", "/generate", body)
        assert e.error is not None and (e.error.status, e.error.body) == (resp.status, await resp.read())
        assert e.params == () and e.upstream == ()


async def test_a_chat_to_triton_shows_the_chat_templates_prompt(tokenizer_folder):
    conf = config("openai", "triton", model="llm", tokenizer=tokenizer_folder)
    e = await explained(conf, {**CHAT, "messages": [{"role": "system", "content": "be brief"}, *CHAT["messages"]]})
    prompt = "<|bos|><|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert e.prompt == prompt
    assert jsonutil.loads(e.upstream[0].body or b"")["text_input"] == prompt
    assert "chat template's prompt:\n  | <|bos|><|im_start|>system\n  | be brief<|im_end|>" in render_text(e)
    # Without the model's files the request is refused, as the gateway refuses it.
    e = await explained(config("openai", "triton", model="llm"), CHAT)
    assert e.prompt is None and e.error is not None and b"tokenizer_not_configured" in e.error.body


async def test_n_the_backend_lacks_fans_out_one_request_per_choice():
    e = await explained(config("openai", "tgi"), {"model": "m", "prompt": "hi", "n": 3, "seed": 7}, "/v1/completions")
    assert (e.fanout.requests, e.fanout.prompts, e.fanout.choices) == (3, 1, 3)
    assert e.fanout.why == "n=3: the backend gives one choice per request"
    assert [jsonutil.loads(u.body or b"")["parameters"]["seed"] for u in e.upstream] == [7, 8, 9]
    assert fate(e, "n")[:2] == ("emulate", ())
    assert "fan-out: 3 upstream requests (n=3: the backend gives one choice per request)" in render_text(e)
    e = await explained(config("openai", "tgi"), {"model": "m", "prompt": ["a", "b"]}, "/v1/completions")
    assert (e.fanout.requests, e.fanout.prompts, e.fanout.why) == (
        2,
        2,
        "2 prompts: the backend takes one prompt per request",
    )


async def test_a_pass_through_shows_the_body_as_forwarded(upstream, make_gateway):
    conf = config("openai", "openai", upstream.url, model="served")
    body = b'{"model": "m",  "messages": [{"role": "user", "content": "hi"}], "unknown_field": [1, 2]}'
    gw = await make_gateway(conf)
    await gw.post("/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    e = await explain(parse_config(conf), "r", None, body)
    assert e.passthrough and "pass-through" in e.notes[0]
    assert e.upstream[0].body == upstream.last.body
    assert jsonutil.loads(upstream.last.body) == {**jsonutil.loads(body), "model": "served"}


# ---- explain and the gateway agree --------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("backend", list(CLIENTS))
@pytest.mark.parametrize("client", list(CLIENTS))
async def test_explain_shows_what_the_gateway_sends(
    client: str, backend: str, stream: bool, upstream: FakeUpstream, make_gateway: Any, tokenizer_folder: str
):
    conf = config(
        client, backend, upstream.url, model="m2", tokenizer=tokenizer_folder, headers={"Authorization": SECRET}
    )
    path, body = CLIENTS[client]
    if stream:
        body = {**body, "stream": True} if client != "tgi" else body
        path = path.replace("/generate", "/generate_stream")
    # The request id and the Inference Extension's headers go on; the client's key does not.
    client_headers = {"X-Request-Id": "rid-1", "X-Gateway-Inference-Objective": "batch", "Authorization": "Bearer c"}
    gw = await make_gateway(conf)
    resp = await gw.post(path, json=body, headers=client_headers)
    e = await explained(conf, body, path, headers=client_headers)
    if not upstream.requests:
        # A pair that cannot carry the request (completions to a Messages backend): the same error.
        assert e.error is not None and e.upstream == ()
        assert (e.error.status, e.error.body) == (resp.status, await resp.read())
        return
    assert e.error is None and len(e.upstream) == len(upstream.requests) == 1
    sent, shown = upstream.last, e.upstream[0]
    assert shown.body == sent.body  # byte for byte
    assert (shown.method, shown.target) == (sent.method, sent.path + ("?" + sent.query if sent.query else ""))
    assert shown.url == upstream.url + shown.target
    received = {n.lower(): v for n, v in sent.headers.items()}
    assert [n.lower() for n, _ in shown.headers] == list(received)
    for name, value in shown.headers:
        assert value == (REDACTED if name == "Authorization" else received[name.lower()])
    assert SECRET not in render_text(e) and SECRET not in jsonutil.dumps_str(as_json(e))


async def test_the_model_picks_the_route_as_it_does_in_the_gateway():
    conf = {
        "backends": {
            "a": {"dialect": "openai", "url": "http://127.0.0.1:9"},
            "b": {"dialect": "tgi", "url": "http://127.0.0.1:9"},
        },
        "routes": [
            {"name": "r", "dialect": "openai", "backend": "a", "models": ["x"]},
            {"name": "s", "dialect": "openai", "backend": "b", "models": ["y"]},
        ],
    }
    e = await explained(conf, {"model": "y", "prompt": "hi"}, "/v1/completions")
    assert (e.route, e.backend) == ("s", "b")
    assert "the request's model is served by route 's': explained for it" in e.notes
    e = await explained(conf, {"model": "z", "prompt": "hi"}, "/v1/completions")
    assert e.error is not None and e.error.status == 404 and b"model_not_found" in e.error.body


# ---- nothing is sent, nothing secret is shown ---------------------------------------------------


class Listener:
    """A TCP port that counts the connections made to it and never answers."""

    def __init__(self) -> None:
        self.connections = 0
        self.url = ""

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    seen = Listener()
    server = await asyncio.start_server(seen.accept, "127.0.0.1", 0)
    seen.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        yield seen


@pytest.mark.parametrize("backend", list(CLIENTS))
async def test_nothing_is_sent_to_any_backend(backend: str, listener: Listener, tokenizer_folder: str):
    conf = config("openai", backend, listener.url, model="m2", tokenizer=tokenizer_folder)
    e = await explained(conf, {**CHAT, "stream": True})
    assert len(e.upstream) == 1 and e.error is None
    await asyncio.sleep(0.05)  # a connection attempt, had one been made, would be counted by now
    assert listener.connections == 0


async def test_the_command_explains_without_connecting(tmp_path: Path, listener: Listener):
    conf = tmp_path / "gw.yaml"
    conf.write_text(
        jsonutil.dumps_str(
            {
                "backends": {"up": {"dialect": "openai", "url": listener.url, "model": "gpt-x"}},
                "routes": [{"name": "chat", "dialect": "databricks", "backend": "up"}],
            }
        )
    )
    request = tmp_path / "req.json"
    request.write_text(jsonutil.dumps_str({"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_k": 5}))
    code, out, err = await command("--config", str(conf), "--route", "chat", "--json", str(request))
    assert code == 0, err
    shown = jsonutil.loads(out)
    assert [p["fate"] for p in shown["parameters"]] == ["drop"]
    assert shown["upstream"][0]["url"] == listener.url + "/v1/chat/completions"
    assert shown["response_headers"] == {"X-Gateway-Dropped-Params": "top_k"}
    assert listener.connections == 0
    # A request the gateway would refuse is still explained (exit 0); what cannot be explained is
    # a usage error (exit 2) that lists the choices.
    request.write_text('{"messages": "hi"}')
    code, out, _ = await command("--config", str(conf), "--route", "chat", str(request))
    assert code == 0 and "refused: the client gets 400" in out
    code, _, err = await command("--config", str(conf), "--route", "nope", str(request))
    assert (code, err) == (2, "no route 'nope'; the routes are: chat\n")
    code, _, err = await command("--config", str(conf), "--route", "chat", "--path", "/v9", str(request))
    assert code == 2 and "/serving-endpoints/chat/completions" in err and "/serving-endpoints/{name}/invocations" in err
    code, _, err = await command("--config", str(conf), "--route", "chat", str(tmp_path / "missing.json"))
    assert code == 2 and "cannot read" in err


async def command(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "explain", *args, cwd=ROOT, stdout=-1, stderr=-1
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_credentials_are_never_shown():
    conf = config(
        "openai",
        "tgi",
        "http://user:url-password-1234@10.0.0.1:8080/base?token=query-secret-99",
        headers={"X-Api-Key": "backend-key-5678"},
        proxy="http://puser:proxy-password-4321@10.0.0.2:3128",
    )
    client = {"Authorization": "Bearer client-key-8765", "X-Request-Id": "r-9"}
    e = await explained(conf, {"model": "m", "prompt": "hi"}, "/v1/completions", headers=client)
    shown = render_text(e) + jsonutil.dumps_str(as_json(e))
    for secret in (
        "url-password-1234",
        "query-secret-99",
        "backend-key-5678",
        "proxy-password-4321",
        "client-key-8765",
    ):
        assert secret not in shown
    headers = dict(e.upstream[0].headers)
    # The backend's own header, the URL's user:password (as Basic credentials), the proxy's.
    assert headers["X-Api-Key"] == headers["Authorization"] == headers["Proxy-Authorization"] == REDACTED
    assert headers["X-Request-Id"] == "r-9"
    assert e.upstream[0].proxy == "http://10.0.0.2:3128"
    # Through an http proxy the request target is the whole URL; a query's values are hidden.
    assert e.upstream[0].target == "http://10.0.0.1:8080/base/generate?token=…"
    assert "the client's Authorization is not forwarded: each side has its own credentials" in e.notes


async def test_a_simulated_backend_is_explained_as_its_dialects_own_server():
    conf = {
        "backends": {"up": {"dialect": "tgi", "simulate": True}},
        "routes": [{"name": "r", "dialect": "openai", "backend": "up"}],
    }
    e = await explained(conf, {"model": "m", "prompt": "hi"}, "/v1/completions")
    assert e.simulated and e.upstream[0].url is None and e.upstream[0].target == "/generate"
    assert "the backend is an in-process simulated tgi server" in e.notes
    assert "Host" not in dict(e.upstream[0].headers)


# ---- paths and the JSON shape ---------------------------------------------------------------------


async def test_the_path_defaults_to_the_chat_path_and_an_unknown_one_lists_the_choices():
    cfg: Config = parse_config(config("mindie", "openai"))
    e = await explain(cfg, "r", None, jsonutil.dumps(CHAT))
    assert e.path == "/v1/chat/completions"
    with pytest.raises(ExplainError, match="say which path the request is for"):
        await explain(parse_config(config("tgi", "openai")), "r", None, b"{}")
    with pytest.raises(ExplainError) as refused:
        await explain(cfg, "r", "/nope", b"{}")
    assert str(refused.value) == (
        "the route mounts no inference path '/nope'; its paths: /infer, /infer_token, /generate, "
        "/generate_stream, /, /v1/chat/completions, /v1/completions"
    )
    e = await explain(parse_config(config("triton", "tgi")), "r", "/v2/models/x/versions/3/generate", b"{}")
    assert e.path == "/v2/models/x/versions/3/generate"


async def test_every_field_of_the_json_shape_is_documented():
    e = await explained(config("openai", "tgi"), {"model": "m", "prompt": "hi", "stop": ["x"]}, "/v1/completions")
    doc = (ROOT / "docs" / "explain.md").read_text()
    shape = as_json(e)
    fields = set(shape) | {f"backend.{k}" for k in shape["backend"]} | {f"upstream[].{k}" for k in shape["upstream"][0]}
    fields |= {f"parameters[].{k}" for k in shape["parameters"][0]} | {f"fanout.{k}" for k in shape["fanout"]}
    fields |= {f"stops.{k}" for k in shape["stops"]}
    missing = sorted(f for f in fields if f"`{f}`" not in doc)
    assert missing == []


async def test_a_plug_in_dialect_is_explained_with_its_own_key_header_kept_back(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(registry.DIALECTS, "plain", PLAIN)
    conf = config("plain", "openai", model="gpt-x")
    e = await explained(conf, {"text": "hi", "max": 3}, headers={"X-Plain-Key": "k1"})
    assert e.path == "/plain/generate"
    assert jsonutil.loads(e.upstream[0].body or b"") == {"model": "gpt-x", "prompt": "hi", "max_tokens": 3}
    assert "the client's X-Plain-Key is not forwarded: each side has its own credentials" in e.notes
    assert "X-Plain-Key" not in dict(e.upstream[0].headers)
