"""A dialect is a plug-in: one folder and one registry line (the test suite's `plain` dialect, in
tests/plugin_dialect, spoken only by clients), and the config refuses what a dialect lacks."""

import asyncio
import contextlib
from typing import Any

import pytest
from aiohttp import web

from gateway import jsonutil
from gateway.codec.contract import Dialect
from gateway.config import ConfigError, parse_config
from gateway.dialects import registry
from tests.plugin_dialect import DIALECT as PLAIN
from tests.support import Recorded, json_reply


@pytest.fixture
def plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.DIALECTS, "plain", PLAIN)  # the one registry line


def _config(url: str, **more: Any) -> dict[str, Any]:
    return {
        "backends": {"up": {"dialect": "openai", "url": url}},
        "routes": [{"name": "p", "dialect": "plain", "backend": "up"}],
        **more,
    }


async def test_an_inbound_only_dialect_mounts_and_translates(plain, upstream, make_gateway):
    upstream.reply = json_reply({"id": "c", "object": "text_completion", "model": "m", "choices": [
        {"index": 0, "text": " there", "finish_reason": "length"}]})  # fmt: skip
    gw = await make_gateway(_config(upstream.url))
    resp = await gw.post("/plain/generate", json={"text": "hi", "max": 3})
    assert resp.status == 200
    assert await resp.json() == {"output": " there", "finish": "length"}
    sent = upstream.last.json
    assert upstream.last.path == "/v1/completions"
    assert sent["prompt"] == "hi" and sent["max_tokens"] == 3
    bad = await gw.post("/plain/generate", json={"text": 5})
    assert bad.status == 400 and "text" in (await bad.json())["problem"]


async def test_an_inbound_dialect_says_where_its_clients_put_their_key(plain, upstream, make_gateway):
    upstream.reply = json_reply({"id": "c", "object": "text_completion", "model": "m", "choices": [
        {"index": 0, "text": "ok", "finish_reason": "stop"}]})  # fmt: skip
    gw = await make_gateway(_config(upstream.url, auth={"api_keys": ["k1"]}))
    assert (await gw.post("/plain/generate", json={"text": "a"})).status == 401
    bearer = await gw.post("/plain/generate", json={"text": "a"}, headers={"Authorization": "Bearer k1"})
    assert bearer.status == 401  # this dialect's clients do not send it that way
    own = await gw.post("/plain/generate", json={"text": "a"}, headers={"X-Plain-Key": "k1"})
    assert own.status == 200
    assert "k1" not in upstream.last.headers.get("X-Plain-Key", "")


def test_a_backend_cannot_speak_a_dialect_without_its_outbound_half(plain):
    data = {
        "backends": {"up": {"dialect": "plain", "url": "http://h:1"}},
        "routes": [{"name": "r", "dialect": "openai", "backend": "up"}],
    }
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert e.value.lines == [
        "backends.up.dialect: the plain dialect is spoken only by clients: a backend cannot speak it"
    ]


def test_a_route_cannot_take_a_dialect_without_its_inbound_half(monkeypatch):

    monkeypatch.setitem(
        registry.DIALECTS, "servers-only", Dialect("servers-only", outbound=registry.get("tgi").outbound)
    )
    data = {
        "backends": {"up": {"dialect": "servers-only", "url": "http://h:1"}},
        "routes": [{"name": "r", "dialect": "servers-only", "backend": "up"}],
    }
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert e.value.lines == [
        "routes.0.dialect: the servers-only dialect is spoken only by servers: a route cannot take it"
    ]


def test_the_embedded_default_mounts_only_what_clients_speak(plain):
    from gateway.configfile import embedded_default

    routes = {r.dialect for r in embedded_default().routes}
    assert "plain" in routes
    assert routes == set(registry.inbound_names())


def _completion(text: str) -> dict[str, Any]:
    return {"id": "c", "object": "text_completion", "model": "m", "choices": [
        {"index": 0, "text": text, "finish_reason": "stop"}]}  # fmt: skip


async def test_what_a_stateful_api_keeps_is_each_callers_own(plain, upstream, make_gateway):
    gw = await make_gateway(_config(upstream.url, auth={"api_keys": ["k1", "k2"]}))
    for key, text in (("k1", "one"), ("k2", "two")):
        upstream.reply = json_reply(_completion(text))
        assert (await gw.post("/plain/generate", json={"text": "a"}, headers={"X-Plain-Key": key})).status == 200
    assert await (await gw.get("/plain/last", headers={"X-Plain-Key": "k1"})).json() == {"last": "one"}
    assert await (await gw.get("/plain/last", headers={"X-Plain-Key": "k2"})).json() == {"last": "two"}
    assert (await gw.get("/plain/last")).status == 401


async def test_a_pinging_stream_pings_in_each_silence_and_keeps_what_it_sent(plain, upstream, make_gateway):
    """The backend says nothing until the client has seen a ping: the stream's head and the ping
    go out before the first token, and again between tokens."""
    saw_ping = asyncio.Event()

    async def silent_then_text(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for text in ("a", "b"):
            with contextlib.suppress(TimeoutError):  # without pings, the test fails rather than hangs
                await asyncio.wait_for(saw_ping.wait(), 5)
            saw_ping.clear()
            chunk = {"id": "c", "object": "text_completion", "model": "m", "choices": [{"index": 0, "text": text}]}
            await resp.write(b"data: " + jsonutil.dumps(chunk) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    upstream.reply = silent_then_text
    gw = await make_gateway(_config(upstream.url))
    resp = await gw.post("/plain/generate", json={"text": "x", "stream": True})
    assert resp.status == 200
    lines = []
    while line := await resp.content.readline():
        lines.append(line)
        if line == b".\n":
            saw_ping.set()
    said = [line for line in lines if line != b".\n"]
    assert said == [b"a\n", b"b\n", b"end\n"]
    assert lines[0] == b".\n" and lines.index(b"b\n") > lines.index(b"a\n") + 1  # a ping before each
    assert await (await gw.get("/plain/last")).json() == {"last": "ab"}
