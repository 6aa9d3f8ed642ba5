"""Backend faults before the first byte, and bad input, as MindIE, TGI, Triton and Databricks
clients see them: each dialect's own error shape and status, never a 500 of the gateway's own,
never a hang, and the gateway keeps serving afterwards.

Mid-stream faults and client disconnects are in test_faults_streams.py; the helpers here
(route table, error readers) serve both files.
"""

import asyncio
import socket
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from gateway import jsonutil
from tests.conftest import one_route
from tests.fixtures.openai.wire import raw
from tests.support import Recorded, json_reply, raw_reply, sse_reply

MSGS = [{"role": "user", "content": "hi"}]
WAIT = 10  # seconds: a read that takes longer than this is a hang


@dataclass(frozen=True)
class R:
    """One inbound route as a client calls it, and which OpenAI answer serves it."""

    id: str
    dialect: str
    path: str
    body: dict[str, Any]
    task: str  # "chat" | "completion"
    stream: bool
    prefix: str = ""


ROUTES = [
    R("mindie-infer", "mindie", "/infer", {"inputs": "hi"}, "completion", False),
    R("mindie-infer-stream", "mindie", "/infer", {"inputs": "hi", "stream": True}, "completion", True),
    R("mindie-chat", "mindie", "/mi/v1/chat/completions", {"model": "m", "messages": MSGS}, "chat", False, "/mi"),
    R(
        "mindie-chat-stream",
        "mindie",
        "/mi/v1/chat/completions",
        {"model": "m", "messages": MSGS, "stream": True},
        "chat",
        True,
        "/mi",
    ),
    R("tgi-generate", "tgi", "/generate", {"inputs": "hi"}, "completion", False),
    R("tgi-generate_stream", "tgi", "/generate_stream", {"inputs": "hi"}, "completion", True),
    R("tgi-compat", "tgi", "/", {"inputs": "hi"}, "completion", False),
    R("tgi-compat-stream", "tgi", "/", {"inputs": "hi", "stream": True}, "completion", True),
    R("triton-generate", "triton", "/v2/models/m/generate", {"text_input": "hi"}, "completion", False),
    R("triton-generate_stream", "triton", "/v2/models/m/generate_stream", {"text_input": "hi"}, "completion", True),
    R("dbx-chat", "databricks", "/serving-endpoints/m/invocations", {"messages": MSGS}, "chat", False),
    R(
        "dbx-chat-stream",
        "databricks",
        "/serving-endpoints/m/invocations",
        {"messages": MSGS, "stream": True},
        "chat",
        True,
    ),
]
IDS = [r.id for r in ROUTES]
STREAM_ROUTES = [r for r in ROUTES if r.stream]


def config(r: R, url: str, **backend: Any) -> dict[str, Any]:
    cfg = one_route(r.dialect, "openai", url, **backend)
    if r.prefix:
        cfg["routes"][0]["prefix"] = r.prefix
    return cfg


def frames(name: str) -> list[bytes]:
    return [f + b"\n\n" for f in raw(name).split(b"\n\n") if f]


def good_reply(r: R) -> Any:
    if r.stream:
        return sse_reply(frames(f"{r.task}_stream.sse"))
    return raw_reply(raw(f"{r.task}_response.json"))


async def post(gw: Any, path: str, **kw: Any) -> tuple[Any, bytes]:
    """POST and read the whole answer, failing (not hanging) if that takes too long."""

    async def go() -> tuple[Any, bytes]:
        resp = await gw.post(path, **kw)
        return resp, await resp.read()

    return await asyncio.wait_for(go(), WAIT)


async def still_serves(gw: Any, upstream: Any, r: R) -> None:
    upstream.reply = good_reply(r)
    resp, body = await post(gw, r.path, json=r.body)
    assert resp.status == 200, body


# Status and error type/code each dialect gives for a backend condition (each dialect's Errors
# section in docs/dialects/*.md). TGI reports a backend's own 500 as a generation failure (424).
EXPECT: dict[str, dict[str, tuple[int, str | None]]] = {
    "mindie": {
        "connect": (503, "Service Unavailable"),
        "timeout": (500, "Incomplete Generation"),
        "malformed": (424, "Generation Error"),
        "400": (422, "Input Validation Error"),
        "404": (404, "NotFoundError"),
        "422": (422, "Input Validation Error"),
        "429": (429, "Too Many Requests"),
        "500": (500, "Incomplete Generation"),
        "503": (503, "Service Unavailable"),
    },
    "tgi": {
        "connect": (503, "unhealthy"),
        "timeout": (500, "incomplete_generation"),
        "malformed": (424, "generation"),
        "400": (422, "validation"),
        "404": (404, "not_found"),
        "422": (422, "validation"),
        "429": (429, "overloaded"),
        "500": (424, "generation"),
        "503": (503, "unhealthy"),
    },
    "triton": {
        "connect": (503, None),
        "timeout": (500, None),
        "malformed": (500, None),
        "400": (400, None),
        "404": (404, None),
        "422": (400, None),
        "429": (503, None),
        "500": (500, None),
        "503": (503, None),
    },
    "databricks": {
        "connect": (503, "TEMPORARILY_UNAVAILABLE"),
        "timeout": (504, "DEADLINE_EXCEEDED"),
        "malformed": (500, "INTERNAL_ERROR"),
        "400": (400, "INVALID_PARAMETER_VALUE"),
        "404": (404, "RESOURCE_DOES_NOT_EXIST"),
        "422": (400, "INVALID_PARAMETER_VALUE"),
        "429": (429, "REQUEST_LIMIT_EXCEEDED"),
        "500": (500, "INTERNAL_ERROR"),
        "503": (503, "TEMPORARILY_UNAVAILABLE"),
    },
}


def error_message(dialect: str, resp: Any, body: bytes, status: int, etype: str | None) -> str:
    """Check `body` is `dialect`'s error shape with `status` and type/code; return its message."""
    assert resp.status == status, body
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.headers.get("X-Request-Id")
    err = jsonutil.loads(body)
    if dialect in ("mindie", "tgi"):
        assert set(err) == {"error", "error_type"}
        assert err["error_type"] == etype
        msg = err["error"]
    elif dialect == "triton":
        assert set(err) == {"error"}
        msg = err["error"]
    else:
        assert set(err) == {"error_code", "message"}
        assert err["error_code"] == etype
        msg = err["message"]
    assert isinstance(msg, str) and msg
    return msg


async def expect_error(gw: Any, r: R, cond: str, body: dict[str, Any] | bytes | None = None) -> str:
    kw = {"data": body} if isinstance(body, bytes) else {"json": r.body if body is None else body}
    resp, out = await post(gw, r.path, **kw)
    return error_message(r.dialect, resp, out, *EXPECT[r.dialect][cond])


def closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


# ---- backend faults before the first byte ----------------------------------------------------


@pytest.mark.parametrize("r", ROUTES, ids=IDS)
async def test_connection_refused(make_gateway, r):
    gw = await make_gateway(config(r, closed_port_url()))
    for _ in range(2):
        msg = await expect_error(gw, r, "connect")
        assert msg == "backend 'up' is unreachable (ConnectFailed)"
    assert (await gw.get("/metrics")).status == 200


def slow(seconds: float) -> Any:
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return web.json_response({})

    return reply


@pytest.mark.parametrize("r", ROUTES, ids=IDS)
async def test_timeout(upstream, make_gateway, r):
    upstream.reply = slow(5)
    gw = await make_gateway(config(r, upstream.url, timeout_s=0.3))
    msg = await expect_error(gw, r, "timeout")
    assert msg == "backend 'up' did not answer within 0.3s"
    await still_serves(gw, upstream, r)


@pytest.mark.parametrize(
    "reply",
    [
        raw_reply(b"<html>hello</html>", content_type="text/html"),
        raw_reply(b"[1, 2]"),
        raw_reply(b"\xff\xfe\x00garbage"),
    ],
    ids=["html", "json-array", "binary"],
)
@pytest.mark.parametrize("r", ROUTES, ids=IDS)
async def test_non_json_200(upstream, make_gateway, r, reply):
    upstream.reply = reply
    gw = await make_gateway(config(r, upstream.url))
    msg = await expect_error(gw, r, "malformed")
    assert msg.startswith("backend ")
    await still_serves(gw, upstream, r)


ERROR_FIXTURES = {
    400: "error_invalid_request.json",
    404: "error_model_not_found.json",
    422: "error_invalid_request.json",
    429: "error_rate_limit.json",
    500: "error_server.json",
    503: "error_server.json",
}


@pytest.mark.parametrize("status", sorted(ERROR_FIXTURES))
@pytest.mark.parametrize("r", ROUTES, ids=IDS)
async def test_upstream_error_status(upstream, make_gateway, r, status):
    gw = await make_gateway(config(r, upstream.url))
    fixture = raw(ERROR_FIXTURES[status])
    upstream.reply = raw_reply(fixture, status=status)
    msg = await expect_error(gw, r, str(status))
    assert msg == f"backend 'up' answered {status}: {jsonutil.loads(fixture)['error']['message']}"
    upstream.reply = raw_reply(b"upstream exploded\n", status=status, content_type="text/plain")
    msg = await expect_error(gw, r, str(status))
    assert msg == f"backend 'up' answered {status}: upstream exploded"
    await still_serves(gw, upstream, r)


# Each inbound dialect in front of a backend of its own dialect, with that backend's error body.
SAME_DIALECT = [
    (
        "mindie",
        "/infer",
        {"inputs": "hi"},
        422,
        {"error": "top_p out of range", "error_type": "Input Validation Error"},
    ),
    (
        "mindie",
        "/infer",
        {"inputs": "hi", "stream": True},
        503,
        {"error": "stopped", "error_type": "Service Unavailable"},
    ),
    ("tgi", "/generate", {"inputs": "hi"}, 422, {"error": "top_p out of range", "error_type": "validation"}),
    ("tgi", "/generate_stream", {"inputs": "hi"}, 424, {"error": "shard died", "error_type": "generation"}),
    ("triton", "/v2/models/m/generate", {"text_input": "hi"}, 400, {"error": "unexpected inference input"}),
    ("triton", "/v2/models/m/generate_stream", {"text_input": "hi"}, 503, {"error": "model is not ready"}),
    ("databricks", "/serving-endpoints/m/invocations", {"prompt": "hi"}, 400, {"error": "no such field"}),
]
SAME_EXPECT = {422: "422", 503: "503", 424: "500", 400: "400", 404: "404"}
# Dialects whose servers' error bodies reach their own clients as they are.
FORWARDED = {"triton", "databricks"}


@pytest.mark.parametrize(("dialect", "path", "body", "status", "error"), SAME_DIALECT)
async def test_same_dialect_backend_error_body(upstream, make_gateway, dialect, path, body, status, error):
    gw = await make_gateway(one_route(dialect, dialect, upstream.url, model="m"))
    upstream.reply = json_reply(error, status=status)
    r = R("x", dialect, path, body, "completion", False)
    cond = SAME_EXPECT[status]
    if dialect == "tgi" and status == 424:
        cond = "malformed"  # a backend's 424 is a generation failure: TGI's own 424
    if dialect in FORWARDED:
        resp = await gw.post(path, json=body)
        assert resp.status == status and await resp.json() == error
        return
    msg = await expect_error(gw, r, cond)
    assert msg == f"backend 'up' answered {status}: {error['error']}"


# ---- bad input per inbound route (what the dialects' own test files do not cover) -------------

BIG = "x" * 4096
# (route id, path, body, status, type/code); JSON bodies given as dicts, raw ones as bytes.
BAD: list[tuple[str, str, str, Any, int]] = [
    ("mindie", "/infer", "empty", b"", 422),
    ("mindie", "/infer", "null", b"null", 422),
    ("mindie", "/infer", "not utf-8", b'{"inputs": "\xff\xfe"}', 422),
    ("mindie", "/infer", "inputs int", {"inputs": 5}, 422),
    ("mindie", "/infer", "stream string", {"inputs": "x", "stream": "yes"}, 422),
    ("mindie", "/infer", "max_new_tokens string", {"inputs": "x", "parameters": {"max_new_tokens": "5"}}, 422),
    ("mindie", "/infer", "priority 6", {"inputs": "x", "parameters": {"priority": 6}}, 422),
    ("mindie", "/infer", "timeout 3601", {"inputs": "x", "parameters": {"timeout": 3601}}, 422),
    ("mindie", "/infer", "temperature 0", {"inputs": "x", "parameters": {"temperature": 0}}, 422),
    ("mindie", "/infer", "parameters list", {"inputs": "x", "parameters": [1]}, 422),
    ("mindie", "/infer_token", "input_id 0", {"input_id": [0, 5]}, 422),
    ("mindie", "/infer_token", "input_id strings", {"input_id": ["a"]}, 422),
    ("mindie", "/infer", "oversized", {"inputs": BIG}, 422),
    ("mindie", "/mi/v1/chat/completions", "messages string", {"model": "m", "messages": "hi"}, 422),
    ("mindie", "/mi/v1/chat/completions", "not utf-8", b'{"model": "\xff"}', 422),
    (
        "mindie",
        "/mi/v1/chat/completions",
        "oversized",
        {"model": "m", "messages": [{"role": "user", "content": BIG}]},
        422,
    ),
    ("tgi", "/generate", "empty", b"", 422),
    ("tgi", "/generate", "null", b"null", 422),
    ("tgi", "/generate", "no inputs", {"parameters": {}}, 422),
    ("tgi", "/generate_stream", "not utf-8", b'{"inputs": "\xff"}', 422),
    ("tgi", "/generate_stream", "max_new_tokens 0", {"inputs": "x", "parameters": {"max_new_tokens": 0}}, 422),
    ("tgi", "/", "top_k string", {"inputs": "x", "parameters": {"top_k": "a"}}, 422),
    ("tgi", "/", "stream string", {"inputs": "x", "stream": "yes"}, 422),
    ("tgi", "/generate", "oversized", {"inputs": BIG}, 422),
    ("triton", "/v2/models/m/generate", "empty", b"", 400),
    ("triton", "/v2/models/m/generate", "array", b"[1]", 400),
    ("triton", "/v2/models/m/generate", "not utf-8", b'{"text_input": "\xff"}', 400),
    ("triton", "/v2/models/m/generate", "id int", {"text_input": "x", "id": 5}, 400),
    ("triton", "/v2/models/m/generate_stream", "max_tokens string", {"text_input": "x", "max_tokens": "many"}, 400),
    ("triton", "/v2/models/m/generate_stream", "null text", {"text_input": None}, 400),
    ("triton", "/v2/models/m/generate", "oversized", {"text_input": BIG}, 400),
    ("databricks", "/serving-endpoints/m/invocations", "empty", b"", 400),
    ("databricks", "/serving-endpoints/m/invocations", "not utf-8", b'{"prompt": "\xff"}', 400),
    ("databricks", "/serving-endpoints/m/invocations", "temperature 3", {"messages": MSGS, "temperature": 3}, 400),
    ("databricks", "/serving-endpoints/m/invocations", "stream string", {"messages": MSGS, "stream": "yes"}, 400),
    ("databricks", "/serving-endpoints/chat/completions", "no model", {"messages": MSGS}, 400),
    ("databricks", "/serving-endpoints/m/invocations", "oversized", {"prompt": BIG}, 413),
]
BAD_TYPE = {
    "mindie": {422: "Input Validation Error"},
    "tgi": {422: "validation"},
    "triton": {400: None},
    "databricks": {400: "INVALID_PARAMETER_VALUE", 413: "BAD_REQUEST"},
}


@pytest.mark.parametrize(("dialect", "path", "case", "body", "status"), BAD, ids=[f"{c[0]}{c[1]}-{c[2]}" for c in BAD])
async def test_bad_input(upstream, make_gateway, dialect, path, case, body, status):
    prefix = "/mi" if path.startswith("/mi/") else ""
    r = R(case, dialect, path, {}, "chat" if "chat" in path else "completion", False, prefix)
    cfg = config(r, upstream.url)
    cfg["limits"] = {"max_body_bytes": 2048}
    gw = await make_gateway(cfg)
    kw = {"data": body} if isinstance(body, bytes) else {"json": body}
    resp, out = await post(gw, path, **kw)
    error_message(dialect, resp, out, status, BAD_TYPE[dialect][status])
    assert upstream.requests == []
    good = next(x for x in ROUTES if x.dialect == dialect and x.prefix == prefix and not x.stream)
    await still_serves(gw, upstream, good)
