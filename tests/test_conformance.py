"""The conformance matrix: every inbound request kind, every outbound dialect, stream on/off.

Each cell runs a real gateway in front of the fake upstream, which answers with the outbound
dialect's fixture payloads. A cell either translates (exact upstream path, the essential
translated body fields, and the fixture's text, finish reason and counts back in the client's
exact shape) or is listed in REFUSED with the error its client must get. Probes outside the
matrix (no tokenizer configured, embeddings, tools) are listed in PROBES, each with its error.
The clients and servers themselves are described in tests/conformance_cells.py and
tests/conformance_servers.py.
"""

from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from gateway import jsonutil
from gateway.adapters import Tokenizer
from tests.conformance_cells import CLIENTS, ID_TEXT, Answer, Client, Ctx, frames, raw
from tests.conformance_servers import SERVERS, Server
from tests.support import FakeUpstream, Recorded

# ---- refusals ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    fragment: str  # a part of the message the client must read
    code: str | None = None  # the OpenAI error `code` (null when None), checked for OpenAI clients


# Matrix cells that must be refused (both stream on and off), with the error.
REFUSED: dict[tuple[str, str], Refusal] = {}

# The refusal status and error shape of each client dialect: (status, read message from body).


def _openai_error(body: Any, r: Refusal) -> str:
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error"
    assert err["code"] == r.code, err
    return str(err["message"])


def _tgi_like_error(error_type: str) -> Any:
    def read(body: Any, r: Refusal) -> str:
        assert set(body) == {"error", "error_type"} and body["error_type"] == error_type
        return str(body["error"])

    return read


def _triton_error(body: Any, r: Refusal) -> str:
    assert set(body) == {"error"}
    return str(body["error"])


def _databricks_error(body: Any, r: Refusal) -> str:
    assert set(body) == {"error_code", "message"} and body["error_code"] == "INVALID_PARAMETER_VALUE"
    return str(body["message"])


ERROR_SHAPES = {
    "openai": (400, _openai_error),
    "mindie": (422, _tgi_like_error("Input Validation Error")),
    "tgi": (422, _tgi_like_error("validation")),
    "triton": (400, _triton_error),
    "databricks": (400, _databricks_error),
}


# ---- helpers -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def ctx(tokenizer_folder: str) -> Ctx:
    return Ctx(Tokenizer.load(tokenizer_folder).encode(ID_TEXT), tokenizer_folder)


def config(client: Client, server: Server, upstream_url: str, tokenizer: str | None) -> dict[str, Any]:
    backend = {**server.backend, "url": upstream_url}
    if tokenizer is not None:
        backend["tokenizer"] = tokenizer
    route: dict[str, Any] = {"name": "r", "dialect": client.dialect, "backend": "up"}
    if client.prefix:
        route["prefix"] = client.prefix
    return {"backends": {"up": backend}, "routes": [route]}


def fixture_reply(path: str, stream: bool) -> Any:
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        if not stream:
            return web.Response(body=raw(path), content_type="application/json")
        resp = web.StreamResponse()
        resp.content_type = "text/event-stream"
        await resp.prepare(request)
        for f in frames(path):
            await resp.write(f)
        await resp.write_eof()
        return resp

    return reply


async def assert_refused(resp: Any, client: Client, refusal: Refusal, upstream: FakeUpstream) -> None:
    status, read = ERROR_SHAPES[client.dialect]
    body = jsonutil.loads(await resp.read())
    assert resp.status == status, body
    assert resp.headers["Content-Type"].startswith("application/json")
    assert refusal.fragment in read(body, refusal)
    assert upstream.requests == []  # refused before anything went upstream


# ---- the matrix --------------------------------------------------------------------------------

CELLS = [
    pytest.param(c, s, stream, id=f"{c.name}->{s.name}{'-stream' if stream else ''}")
    for c in CLIENTS
    for s in SERVERS
    for stream in (False, True)
]


@pytest.mark.parametrize(("client", "server", "stream"), CELLS)
async def test_cell(
    client: Client, server: Server, stream: bool, ctx: Ctx, upstream: FakeUpstream, make_gateway: Any
) -> None:
    reply = server.reply(client.kind, stream)
    upstream.reply = fixture_reply(reply.payload, stream)
    gw = await make_gateway(config(client, server, upstream.url, ctx.tokenizer if server.tokenizer else None))
    resp = await gw.post(client.path(stream), json=client.body(stream, ctx))

    refusal = REFUSED.get((client.name, server.name))
    if refusal is not None:
        await assert_refused(resp, client, refusal, upstream)
        return

    body = await resp.read()
    assert resp.status == 200, body
    (rec,) = upstream.requests
    assert rec.method == "POST"
    assert rec.path == server.path(client.kind, stream)
    server.check(rec.json, client.kind, stream, client, ctx)

    if stream:
        assert resp.headers["Content-Type"].startswith(client.content_type)
        got = client.read_stream(body)
    else:
        assert resp.headers["Content-Type"].startswith("application/json")
        got = client.read(jsonutil.loads(body))
    exp = reply.expected
    carries_prompt, carries_completion = client.counts[stream]
    # A count the fixture lacks may still come from the backend's tokenizer: not asserted then.
    want = Answer(
        exp.text,
        client.finish_words[exp.finish] if client.finish_words is not None else None,
        (got.prompt_tokens if exp.prompt_tokens is None else exp.prompt_tokens) if carries_prompt else None,
        (got.completion_tokens if exp.completion_tokens is None else exp.completion_tokens)
        if carries_completion
        else None,
    )
    if client.paired and exp.prompt_tokens is None and (got.prompt_tokens, got.completion_tokens) == (None, None):
        want = Answer(want.text, want.finish)
    assert got == want


# ---- probes outside the matrix: gaps that cannot be bridged --------------------------------------

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {}}}]
NO_TOKENIZER = Refusal("`tokenizer:`", "tokenizer_not_configured")
EMBEDDINGS = {
    "openai": ("/v1/embeddings", {"model": "m", "input": ["hi"]}),
    "databricks": ("/serving-endpoints/m/invocations", {"input": ["hi"]}),
}


@dataclass(frozen=True)
class Probe:
    client: str
    server: str
    tokenizer: bool  # whether the backend gets the tokenizer folder
    refusal: Refusal
    patch: dict[str, Any] | None = None  # merged into the client's body
    embeddings: bool = False  # the client's embeddings request instead of its generation one
    streams: tuple[bool, ...] = (False, True)


PROBES = {
    # Token ids need the backend's tokenizer to become the text a text-only backend takes.
    "token-ids-no-tokenizer": [
        Probe("mindie-token", "tgi", False, NO_TOKENIZER),
        Probe("mindie-token", "triton-trtllm", False, NO_TOKENIZER),
        Probe("mindie-token", "triton-mindie", False, NO_TOKENIZER),
        Probe("openai-completions", "tgi", False, NO_TOKENIZER, patch={"prompt": [17, 18, 19]}),
        Probe("openai-completions", "triton-vllm", False, NO_TOKENIZER, patch={"prompt": [17, 18, 19]}),
    ],
    # Databricks takes text: token ids need the model's tokenizer to become that text.
    "token-ids-databricks": [
        Probe("openai-completions", "databricks", False, NO_TOKENIZER, {"prompt": [17]}),
    ],
    # Chat to a text-only backend needs the chat template from the tokenizer folder.
    "chat-no-template": [
        Probe("openai-chat", "tgi", False, NO_TOKENIZER),
        Probe("openai-chat", "triton-trtllm", False, NO_TOKENIZER),
        Probe("openai-chat", "triton-vllm", False, NO_TOKENIZER),
        Probe("mindie-openai", "triton-mindie", False, NO_TOKENIZER),
        Probe("databricks-chat", "tgi", False, NO_TOKENIZER),
    ],
    # Generate-only servers compute no embeddings.
    "embeddings": [
        Probe(c, s, True, Refusal("embeddings", "unsupported_task"), embeddings=True, streams=(False,))
        for c in ("openai-chat", "databricks-chat")
        for s in ("tgi", "triton-trtllm", "triton-vllm", "triton-mindie", "mindie")
    ],
    # Tools are a contract parameter: refused where the backend has no tool calling.
    "tools": [
        Probe("openai-chat", "tgi", True, Refusal("tools", "unsupported_parameter"), {"tools": TOOLS}),
        Probe("openai-chat", "triton-trtllm", True, Refusal("tools", "unsupported_parameter"), {"tools": TOOLS}),
        Probe("openai-chat", "triton-vllm", True, Refusal("tools", "unsupported_parameter"), {"tools": TOOLS}),
        Probe("mindie-openai", "tgi", True, Refusal("tools"), {"tools": TOOLS}),
        Probe("databricks-chat", "triton-mindie", True, Refusal("tools"), {"tools": TOOLS}),
    ],
}

_CLIENTS = {c.name: c for c in CLIENTS}
_SERVERS = {s.name: s for s in SERVERS}


def _probe_id(group: str, p: Probe, stream: bool) -> str:
    client = p.client.replace("-chat", "-embeddings") if p.embeddings else p.client
    return f"{group}:{client}->{p.server}{'-stream' if stream else ''}"


PROBE_CELLS = [
    pytest.param(p, stream, id=_probe_id(group, p, stream))
    for group, probes in PROBES.items()
    for p in probes
    for stream in p.streams
]


@pytest.mark.parametrize(("probe", "stream"), PROBE_CELLS)
async def test_probe_refused(probe: Probe, stream: bool, ctx: Ctx, upstream: FakeUpstream, make_gateway: Any) -> None:
    client, server = _CLIENTS[probe.client], _SERVERS[probe.server]
    gw = await make_gateway(config(client, server, upstream.url, ctx.tokenizer if probe.tokenizer else None))
    if probe.embeddings:
        path, body = EMBEDDINGS[client.dialect]
    else:
        path, body = client.path(stream), {**client.body(stream, ctx), **(probe.patch or {})}
    resp = await gw.post(path, json=body)
    await assert_refused(resp, client, probe.refusal, upstream)


def test_tables_name_real_cells() -> None:
    """A typo in a refusal table must not leave a cell unchecked."""
    for client, server in REFUSED:
        assert client in _CLIENTS and server in _SERVERS
    for probes in PROBES.values():
        for p in probes:
            assert p.client in _CLIENTS and p.server in _SERVERS
