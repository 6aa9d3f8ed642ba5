"""The members of aiohttp that aiohttp keeps to itself and the gateway's listener uses
(gateway/protocol.py): if an aiohttp release renames or reshapes one, this fails here, by name,
rather than somewhere in the middle of serving a request. (Those the answers' writers set,
gateway/httpout.py, are held by tests/test_httpout.py, which compares their bytes and
connections with aiohttp's own.)"""

import asyncio
import inspect
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server
from aiohttp.web_urldispatcher import UrlMappingMatchInfo

from gateway.protocol import _CURRENT_APP, Routes


def _params(fn: object) -> list[str]:
    return list(inspect.signature(fn).parameters)  # type: ignore[arg-type]


def test_the_app_members_the_listener_drives():
    assert _params(web.Application._set_loop)[:2] == ["self", "loop"]
    assert _params(web.Application._make_request)[:6] == ["self", "message", "payload", "protocol", "writer", "task"]
    assert _params(web.Application._handle)[:2] == ["self", "request"]
    assert inspect.iscoroutinefunction(web.Application._handle)


async def test_the_protocol_members_the_guard_reads():
    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response()

    server = Server(handler, loop=asyncio.get_running_loop(), access_log=None, keepalive_timeout=5)
    assert isinstance(server._kwargs, dict)  # the handler's settings, passed on to each connection
    assert server._loop is asyncio.get_running_loop()
    protocol = server()
    assert isinstance(protocol, RequestHandler)
    assert protocol._request_count == 0  # requests the parser has handed over on the connection
    assert len(protocol._messages) == 0  # parsed requests not yet answered
    assert protocol._loop is asyncio.get_running_loop()


_NAME = web.AppKey("name", str)


def _routes_app(seen: list[str]) -> web.Application:
    @web.middleware
    async def mark(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append("middleware")
        return await handler(request)

    async def plain(request: web.Request) -> web.StreamResponse:
        return web.Response(text=f"plain {request.query_string} {request.app[_NAME]}")

    async def named(request: web.Request) -> web.StreamResponse:
        return web.Response(text=f"named {request.match_info['name']}")

    app = web.Application(middlewares=[mark])
    app[_NAME] = "the app"
    app.router.add_post("/plain", plain)
    app.router.add_post("/models/{name}/go", named)
    app.freeze()
    return app


async def _answer(routes: Routes, app: web.Application, method: str, path: str, **headers: str) -> tuple[int, str]:
    request = make_mocked_request(method, path, headers=headers, app=app)
    try:
        resp = await routes.handle(request)
    except web.HTTPException as e:  # a path no route takes, as aiohttp's router refuses it
        return e.status, ""
    assert isinstance(resp, web.Response)
    return resp.status, (resp.text or "")


async def test_a_route_found_once_answers_as_aiohttp_finds_it_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    app = _routes_app(seen)
    routes = Routes(app)
    resolves: list[str] = []
    resolve = app.router.resolve

    async def counted(request: web.Request) -> Any:
        resolves.append(request.raw_path)
        return await resolve(request)

    monkeypatch.setattr(app.router, "resolve", counted)
    for _ in range(3):
        assert await _answer(routes, app, "POST", "/plain?x=1") == (200, "plain x=1 the app")
        assert await _answer(routes, app, "POST", "/models/a/go") == (200, "named a")
        assert await _answer(routes, app, "POST", "/models/b/go") == (200, "named b")
    assert resolves == ["/plain?x=1", "/models/a/go", "/models/b/go"]  # each found once
    assert seen == ["middleware"] * 9  # the middlewares run for every request, kept or not
    # Another query, another method, an unknown path: found anew; a refusal is never kept.
    assert await _answer(routes, app, "POST", "/plain?x=2") == (200, "plain x=2 the app")
    for _ in range(2):
        assert (await _answer(routes, app, "GET", "/plain"))[0] == 405
        assert (await _answer(routes, app, "POST", "/nowhere"))[0] == 404
    assert resolves[3:] == ["/plain?x=2", "/plain", "/nowhere", "/plain", "/nowhere"]
    # A request that expects a 100 Continue goes through aiohttp's own steps, which answer it.
    await _answer(routes, app, "POST", "/plain?x=1", Expect="100-continue")
    assert resolves[-1] == "/plain?x=1"


async def test_paths_kept_are_bounded() -> None:
    app = _routes_app([])
    routes = Routes(app)
    for n in range(600):
        assert await _answer(routes, app, "POST", f"/models/m{n}/go") == (200, f"named m{n}")
    assert len(routes._found) == 512
    assert await _answer(routes, app, "POST", "/models/m599/go") == (200, "named m599")


def test_the_members_kept_routes_read() -> None:
    app = web.Application()
    assert app._run_middlewares is None and app._has_legacy_middlewares is True  # set when frozen
    frozen = _routes_app([])
    assert frozen._run_middlewares is True and frozen._has_legacy_middlewares is False
    # aiohttp's own middleware, around the app's, that only names the current app (sub-apps).
    assert frozen._middlewares_handlers is not None
    assert [m.__qualname__ for m, _ in frozen._middlewares_handlers][-1] == _CURRENT_APP
    request = make_mocked_request("GET", "/", app=app)
    match = UrlMappingMatchInfo({"name": "x"}, request.match_info.route)
    request = make_mocked_request("GET", "/", app=app)
    request._match_info = match  # what the handler then reads as `match_info`
    assert request.match_info is match
    assert match.apps == ()
