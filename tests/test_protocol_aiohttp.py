"""The members of aiohttp that aiohttp keeps to itself and the gateway's listener uses
(gateway/protocol.py): if an aiohttp release renames or reshapes one, this fails here, by name,
rather than somewhere in the middle of serving a request. (Those the answers' writers set,
gateway/httpout.py, are held by tests/test_httpout.py, which compares their bytes and
connections with aiohttp's own.)"""

import asyncio
import inspect

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server


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
