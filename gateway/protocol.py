"""The guarded HTTP protocol: aiohttp's per-connection protocol with a header deadline and cap;
and, with gateway.httpout, a place that reaches into aiohttp's own members (see the end of
this module).

aiohttp's server has no deadline for a request's headers and no cap on their total size, so a
client that opens connections and dribbles header bytes (slowloris) holds them for as long as the
keep-alive timeout. The guarded protocol adds both: the headers of each request must be complete
within `limits.client_header_timeout_s` of the connection opening (or of the request's first byte
on a kept-alive connection) and within `limits.max_header_bytes`; otherwise the client gets a 408
or 431 and the connection closes. Body deadlines are the exchange handler's (it reads the body).
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial, update_wrapper
from typing import Any, cast

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_exceptions import BadHttpMethod, HttpProcessingError
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server
from aiohttp.web_urldispatcher import MatchInfoError, SystemRoute, UrlMappingMatchInfo

from gateway import jsonutil
from gateway.config import Limits
from gateway.records import record

log = logging.getLogger("gateway")
# How long a refused connection's further bytes are read and dropped before it closes.
_LINGER_S = 2.0


@record
class Guard:
    """The per-connection limits, fixed when a connection opens."""

    header_timeout_s: float
    max_header_bytes: int
    keepalive_s: float = 75.0

    @classmethod
    def of(cls, limits: Limits) -> "Guard":
        return cls(limits.client_header_timeout_s, limits.max_header_bytes, limits.client_keepalive_timeout_s)


def _refusal(status: int, reason: str, message: str) -> bytes:
    body = jsonutil.dumps({"error": message})
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class GuardedHandler(RequestHandler):
    """aiohttp's per-connection protocol, with a header deadline and a header size cap.

    "Awaiting headers" holds from the connection's opening, and again after each answer, until
    the parser hands over the next request. The deadline runs from the opening (a connection
    that sends nothing is closed too) or, on a kept-alive connection, from the next request's
    first byte, so idle keep-alive time is the keep-alive timeout's business.
    """

    __slots__ = ("_guard", "_header_bytes", "_header_deadline", "_header_timer", "_refused", "_wants_headers")

    def __init__(self, manager: Server, *, guard: Guard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._wants_headers = True
        self._header_bytes = 0
        # When the awaited headers are due (loop time; 0 until the request's first byte). One
        # timer per connection looks at it when it fires, rather than one timer per request.
        self._header_deadline = 0.0
        self._header_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        """The headers are awaited from now; the connection's timer is set unless it runs."""
        self._header_deadline = self._loop.time() + self._guard.header_timeout_s
        if self._header_timer is None:
            self._header_timer = self._loop.call_at(self._header_deadline, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self._wants_headers or not self._header_deadline or self.transport is None:
            return  # no headers awaited, or the next request's not begun: its first byte arms
        if self._loop.time() < self._header_deadline:
            # Set for an earlier request: this one's headers are due later.
            self._header_timer = self._loop.call_at(self._header_deadline, self._headers_late)
            return
        if self._header_bytes:
            limit = f"{self._guard.header_timeout_s:g}s"
            self._refuse(408, "Request Timeout", f"the request headers did not arrive within {limit}")
        else:
            self.force_close()  # nothing was asked: nothing to answer

    def _refuse(self, status: int, reason: str, message: str) -> None:
        log.info("closing a connection: %s (%d)", message, status)
        if self.transport is not None:
            self.transport.write(_refusal(status, reason, message))
        self._shut()

    def _shut(self) -> None:
        """Close after what was written. Closing at once while the client's unread bytes sit in
        the receive buffer would reset the connection and could destroy the answer on its way,
        so the write side is shut first and whatever else arrives is dropped for a short linger."""
        transport = self.transport
        self._wants_headers = False
        self._refused = True
        self._disarm()
        if transport is None or not transport.can_write_eof():
            self.force_close()
            return
        transport.write_eof()
        self._loop.call_later(_LINGER_S, self.force_close)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._wants_headers or not data:
            super().data_received(data)
            return
        self._header_bytes += len(data)
        if not self._header_deadline:
            self._arm()  # the request's first byte: its deadline starts
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            self._wants_headers = False
            self._header_bytes = 0
            self._header_deadline = 0.0  # the timer, when it fires, finds nothing due
        elif self._header_bytes > self._guard.max_header_bytes:
            limit = self._guard.max_header_bytes
            self._refuse(431, "Request Header Fields Too Large", f"the request headers exceed {limit} bytes")

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        out = await super().finish_response(request, resp, start_time)
        if not resp.keep_alive and not request.content.is_eof():
            # Answered before the body was whole (it came too slowly): the rest is not waited for.
            self._shut()
        elif not self._messages:
            # The next request's headers are awaited; its deadline starts with its first byte.
            self._wants_headers = True
            self._header_bytes = 0
        return out

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """A request the parser could not read gets the JSON error the header deadline and cap
        give (its path, and so its dialect, may be unknown), not aiohttp's text page; the reason
        is aiohttp's, cut before the request bytes it quotes."""
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        reason = (message or exc.message or "").split("\n", 1)[0].split(": ", 1)[0].rstrip(": ") or "unreadable"
        # Scanners and TLS sent to the plain port open with a bad method: as aiohttp, not worth INFO.
        level = logging.DEBUG if isinstance(exc, BadHttpMethod) and self._request_count == 1 else logging.INFO
        log.log(level, "refusing a request that is not valid HTTP/1.1: %s (%d)", reason, status)
        body = jsonutil.dumps({"error": f"the request is not valid HTTP/1.1: {reason}"})
        resp = web.Response(status=status, body=body, content_type="application/json")
        resp.force_close()
        return resp


class GuardedServer(Server):
    guard: Guard

    def __call__(self) -> RequestHandler:
        kwargs = {**self._kwargs, "keepalive_timeout": self.guard.keepalive_s}
        return GuardedHandler(self, loop=self._loop, guard=self.guard, **kwargs)


# ---- aiohttp's own app, driven from a listener that is not its own ---------------------------
# The gateway's listener hands requests to whichever app is current (gateway.server.Switch), so
# it does for an app what aiohttp's AppRunner does, through members aiohttp keeps to itself.
# They are used here only; tests/test_protocol_aiohttp.py fails loudly if aiohttp changes them.


def bind_loop(app: web.Application) -> None:
    """Tell the app which event loop runs it, as AppRunner does before starting it."""
    app._set_loop(asyncio.get_running_loop())


def make_request(
    app: web.Application,
    message: RawRequestMessage,
    payload: StreamReader,
    protocol: RequestHandler,
    writer: AbstractStreamWriter,
    task: "asyncio.Task[None]",
) -> web.BaseRequest:
    """The app's own request object for a request that came in (it carries the app's body limit)."""
    return app._make_request(message, payload, protocol, writer, task)


# How many (method, path) pairs an app's Routes keeps; paths come from clients (a model's name
# in the path, a query), so past this they are resolved each time as aiohttp does.
_KEPT_PATHS = 512


# The middleware aiohttp puts around every app's own, which makes the app the match's current
# one while it runs (for sub-apps); a match of the app alone already names it.
_CURRENT_APP = "_fix_request_current_app.<locals>.impl"


def _wrapped(app: web.Application, handler: Callable[[web.Request], Any]) -> Callable[[web.Request], Any]:
    """`handler` within `app`'s middlewares, as aiohttp wraps it for a match of `app` alone."""
    chain = app._middlewares_handlers or ()
    if chain and getattr(chain[-1][0], "__qualname__", None) == _CURRENT_APP:
        chain = chain[:-1]
    for middleware, _ in chain:
        handler = update_wrapper(partial(middleware, handler=handler), handler)
    return handler


class Routes:
    """An app's answer to a request (its middlewares, then the route's handler), as aiohttp's
    `Application._handle` gives it, but with what the router finds for a method and path kept.
    aiohttp walks the router's resources, builds and freezes a match and looks up the handler
    wrapped in the middlewares for every request; a frozen match is the same for every request
    of one method and path (its query included), so it is found once and handed to each, with
    the handler wrapped once in the app's middlewares (not in the one aiohttp adds to name the
    current app, which a match of the app alone already names). A request with an `Expect`
    header, and a path no route took, go through aiohttp's own steps."""

    __slots__ = ("_app", "_found")

    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._found: dict[tuple[str, str], tuple[UrlMappingMatchInfo, Callable[[web.Request], Any]]] = {}

    def handle(self, base: web.BaseRequest) -> Awaitable[web.StreamResponse]:
        request = cast(web.Request, base)  # the app made it (`make_request`)
        found = self._found.get((request.method, request.raw_path))
        if found is None or hdrs.EXPECT in request.headers:
            return self._resolve(request)
        request._match_info = found[0]
        return cast(Awaitable[web.StreamResponse], found[1](request))

    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        app = self._app
        try:
            return await app._handle(request)
        finally:
            match = request._match_info
            if (
                len(self._found) < _KEPT_PATHS
                and isinstance(match, UrlMappingMatchInfo)
                and not isinstance(match, MatchInfoError)
                and not isinstance(match.route, SystemRoute)
                and app._run_middlewares
                and not app._has_legacy_middlewares
                and match.apps == (app,)
            ):
                self._found[request.method, request.raw_path] = (match, _wrapped(app, match.handler))
