"""Backend URLs: a path joined under a base URL that has a path and a query of its own, and
backends on a unix socket (`unix:/path.sock`, `http+unix://%2Fpath.sock/prefix`), served here by a
real aiohttp server on a socket: requests, the /readyz probe and the metrics page over it."""

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web

from gateway.config import ConfigError, parse_config
from gateway.proxy import poolmember
from gateway.upstream import Target, shown_url
from gateway.upstream.target import join
from tests.conftest import one_route
from tests.fixtures.openai.wire import load
from tests.support import FakeUpstream, Recorded, json_reply

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
PAGES = Path(__file__).parent / "fixtures" / "poolmember"


@pytest.mark.parametrize(
    ("base", "path", "joined"),
    [
        ("http://h:1", "/v1/models", "http://h:1/v1/models"),
        ("http://h:1/", "/v1/models", "http://h:1/v1/models"),
        ("http://h/prefix/", "/v1/x", "http://h/prefix/v1/x"),
        ("http://h/prefix?api-version=2024-06-01", "/v1/x", "http://h/prefix/v1/x?api-version=2024-06-01"),
        ("http://h/prefix/?api-version=1", "/v1/x", "http://h/prefix/v1/x?api-version=1"),
        ("http://h/p?a=1", "/v1/x?b=2", "http://h/p/v1/x?a=1&b=2"),
        ("http://h/p", "/v1/x?b=2", "http://h/p/v1/x?b=2"),
        ("http://h/metrics?token=t", "", "http://h/metrics?token=t"),  # a whole URL stays as it is
    ],
)
def test_a_path_goes_under_the_base_and_before_its_query(base: str, path: str, joined: str) -> None:
    assert join(base, path) == joined


@pytest.mark.parametrize(
    ("base", "path", "socket", "request_target", "authorization"),
    [
        ("unix:/run/vllm.sock", "/v1/models", "/run/vllm.sock", b"/v1/models", None),
        ("unix:///run/vllm.sock", "/v1/models", "/run/vllm.sock", b"/v1/models", None),
        ("unix:/run/vllm.sock", "", "/run/vllm.sock", b"/", None),
        ("http+unix://%2Frun%2FVLLM.sock/prefix?k=v", "/v1/x", "/run/VLLM.sock", b"/prefix/v1/x?k=v", None),
        ("http+unix://%2Frun%2Fa%20b.sock", "/v1/x", "/run/a b.sock", b"/v1/x", None),
        ("http+unix://u:p@%2Frun%2Fvllm.sock/", "/v1/x", "/run/vllm.sock", b"/v1/x", "Basic dTpw"),
    ],
)
def test_a_unix_socket_url(base: str, path: str, socket: str, request_target: bytes, authorization: str | None) -> None:
    t = Target.of(base, path)
    assert (t.socket, t.path, t.host_header, t.authorization, t.tls) == (
        socket,
        request_target,
        b"localhost",  # what curl --unix-socket sends
        authorization,
        False,
    )
    assert t.key == ("unix", socket, 0)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://h:1/p", "http://h:1/p"),
        ("http://user:pw@h:1/p", "http://h:1/p"),
        ("https://h/p?api-version=2024-06-01&code=abc", "https://h/p?api-version=…&code=…"),
        ("http+unix://u:pw@%2Frun%2Fx.sock/p", "http+unix://%2Frun%2Fx.sock/p"),
        ("unix:/run/x.sock", "unix:/run/x.sock"),
    ],
)
def test_a_url_in_the_log_shows_no_credentials_nor_query_values(url: str, shown: str) -> None:
    assert shown_url(url) == shown


# ---- a base URL with a query ---------------------------------------------------------------------


async def test_the_base_urls_query_is_kept_on_every_request(upstream: FakeUpstream, make_gateway: Any) -> None:
    upstream.reply = json_reply(load("chat_response.json"))
    gw = await make_gateway(one_route("openai", "openai", upstream.url + "/prefix?api-version=2024-06-01"))
    assert (await gw.post("/v1/chat/completions", json=CHAT)).status == 200
    assert (await gw.get("/readyz")).status == 200
    assert [(r.path, r.query) for r in upstream.requests] == [
        ("/prefix/v1/chat/completions", "api-version=2024-06-01"),
        ("/prefix/v1/models", "api-version=2024-06-01"),  # the probe
    ]


# ---- unix sockets --------------------------------------------------------------------------------


@pytest.fixture
async def on_socket() -> AsyncIterator[tuple[FakeUpstream, str]]:
    """A FakeUpstream served by aiohttp on a unix socket (a short path: sockets' are bounded)."""
    folder = tempfile.mkdtemp(prefix="gw-", dir="/tmp")
    path = os.path.join(folder, "backend.sock")
    up = FakeUpstream()
    runner = web.AppRunner(up.app())
    await runner.setup()
    await web.UnixSite(runner, path).start()
    try:
        yield up, path
    finally:
        await runner.cleanup()
        shutil.rmtree(folder)


async def test_a_backend_on_a_unix_socket_is_asked_and_probed_over_it(
    on_socket: tuple[FakeUpstream, str], make_gateway: Any
) -> None:
    up, path = on_socket
    up.reply = json_reply(load("chat_response.json"))
    gw = await make_gateway(one_route("openai", "openai", f"unix:{path}"))
    for _ in range(2):
        resp = await gw.post("/v1/chat/completions", json=CHAT)
        assert resp.status == 200, await resp.text()
    ready = await gw.get("/readyz")
    assert ready.status == 200, await ready.text()
    assert [(r.path, r.headers["Host"]) for r in up.requests] == [
        ("/v1/chat/completions", "localhost"),
        ("/v1/chat/completions", "localhost"),
        ("/v1/models", "localhost"),
    ]


async def test_a_unix_socket_with_a_base_path_and_query(on_socket: tuple[FakeUpstream, str], make_gateway: Any) -> None:
    up, path = on_socket
    up.reply = json_reply(load("chat_response.json"))
    gw = await make_gateway(one_route("openai", "openai", f"http+unix://{quote(path, safe='')}/base?k=v"))
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 200, await resp.text()
    assert [(r.path, r.query) for r in up.requests] == [("/base/v1/chat/completions", "k=v")]


async def test_the_pool_members_metrics_page_is_read_over_the_socket(
    on_socket: tuple[FakeUpstream, str], make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(poolmember, "SCRAPE_INTERVAL_S", 0.05)
    up, path = on_socket

    async def page(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.Response(text=(PAGES / "vllm.txt").read_text(), content_type="text/plain")

    up.reply = page
    config = one_route("openai", "openai", f"unix:{path}", model="m", options={"extensions": "vllm"})
    gw = await make_gateway({**config, "metrics": {"model_server_gauges": True}})
    for _ in range(200):
        if 'vllm:kv_cache_usage_perc{model_name="m"} 0.4375' in await (await gw.get("/metrics")).text():
            break
        await asyncio.sleep(0.02)
    else:
        pytest.fail("the KV figure never came over the socket")
    assert up.requests[0].path == "/metrics"


async def test_a_socket_not_there_yet_is_no_config_error_and_the_backend_is_unreachable(make_gateway: Any) -> None:
    gw = await make_gateway(one_route("openai", "openai", "unix:/nonexistent/vllm.sock"))
    resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 502 and "unreachable" in (await resp.json())["error"]["message"]
    assert (await gw.get("/readyz")).status == 503


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (
            "http://unix:/run/vllm.sock:",
            "'http://unix:/run/vllm.sock:' is nginx's spelling of a unix socket; write 'unix:/run/vllm.sock'",
        ),
        (
            "http://unix:/run/vllm.sock:/v1",
            "'http://unix:/run/vllm.sock:/v1' is nginx's spelling of a unix socket; "
            "write 'http+unix://%2Frun%2Fvllm.sock/v1'",
        ),
        ("unix:run/vllm.sock", "'unix:run/vllm.sock': a unix socket's path must be absolute (unix:/run/server.sock)"),
        ("http+unix://run.sock/p", "'http+unix://run.sock/p': a unix socket's path must be absolute"),
        ("unix:/run/vllm.sock?k=v", "'unix:/run/vllm.sock?k=v': a unix: URL names only a socket"),
        ("http://h/p#frag", "a backend URL has no #fragment to send: 'http://h/p#frag'"),
    ],
)
def test_a_url_the_gateway_cannot_reach_is_a_config_error(url: str, problem: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(one_route("openai", "openai", url))
    assert len(e.value.lines) == 1 and e.value.lines[0].startswith(f"backends.up.url: {problem}"), e.value.lines
