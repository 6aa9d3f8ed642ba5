"""An inbound dialect's paths, mounted on the app's router.

A dialect says what it mounts as data (`Inbound.mounts`); this module gives each path its
aiohttp handler: inference paths are served by the exchange handler, the dialect's own small
paths (health, model lists, metadata) get the API-key check where they ask for it and their
errors in the dialect's shape, here, once for all of them.
"""

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.codec.capabilities import key_headers
from gateway.codec.contract import Asked, Caller, Endpoint, Inbound, InfoHandler, ReadingHandler
from gateway.neutral.errors import GatewayError, NotFound
from gateway.proxy.admission import Ticket
from gateway.proxy.exchange import REQUEST_ID, arrival_of, reply_response, request_id_of, serve
from gateway.proxy.intake import check_auth, continue_later, read_body
from gateway.proxy.routing import GroupPaths, RouteGroup
from gateway.proxy.services import SERVICES

log = logging.getLogger("gateway")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _inference(ep: Endpoint, group: RouteGroup, inbound: Inbound) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await serve(request, ep, group, inbound)

    return handle


def _info(info: InfoHandler, group: RouteGroup, inbound: Inbound, auth: bool) -> Handler:
    paths = GroupPaths(group)
    where = key_headers(inbound)

    async def handle(request: web.Request) -> web.StreamResponse:
        svc = request.app[SERVICES]
        try:
            owner = check_auth(request, svc.api_keys, where) if auth else None
            reply = await info(request.match_info, paths, Caller(request_id_of(request), owner or "", svc.store))
        except GatewayError as e:
            reply = inbound.error_reply(e)
        return reply_response(reply)

    return handle


def _reading(reads: ReadingHandler, group: RouteGroup, inbound: Inbound, auth: bool) -> Handler:
    """A path of the dialect's own that reads the query or the body: a body within the same
    limits as an inference path's (its room in the budget, the body deadline, a request slot)."""
    paths = GroupPaths(group)
    where = key_headers(inbound)

    async def handle(request: web.Request) -> web.StreamResponse:
        svc = request.app[SERVICES]
        arrival = arrival_of(request)
        ticket = Ticket()
        body_read = request.method in ("GET", "HEAD", "DELETE")
        try:
            owner = check_auth(request, svc.api_keys, where) if auth else None
            body = b""
            if not body_read:
                body = await read_body(request, arrival, svc.limits, svc.budget, ticket, svc.trusted_proxies)
                body_read = True
                svc.budget.take_slots(ticket, 1)
            asked = Asked(request.match_info, request.query, body)
            reply = await reads(asked, paths, Caller(arrival.request_id, owner or "", svc.store))
        except GatewayError as e:
            reply = inbound.error_reply(e)
        finally:
            svc.budget.release(ticket)
        resp = reply_response(reply)
        resp.headers[REQUEST_ID] = arrival.request_id
        if not body_read:
            resp.force_close()  # refused before its body was read: no one will read the rest
        return resp

    return handle


def mount(router: web.UrlDispatcher, prefix: str, group: RouteGroup, inbound: Inbound) -> None:
    for m in inbound.mounts:
        if m.endpoint is not None:
            handler = _inference(m.endpoint, group, inbound)
        elif m.reads is not None:
            handler = _reading(m.reads, group, inbound, m.auth)
        else:
            assert m.info is not None
            handler = _info(m.info, group, inbound, m.auth)
        # The prefix itself is its root, too.
        for path in (prefix + m.path, prefix) if m.path == "/" and prefix else (prefix + m.path,):
            if m.method == "GET":
                router.add_get(path, handler)  # HEAD as well, as aiohttp gives every GET
            elif m.endpoint is not None or m.reads is not None:
                router.add_route(m.method, path, handler, expect_handler=continue_later)
            else:
                router.add_route(m.method, path, handler)


class ErrorShapes:
    """Which dialect answers for a path no route matched: the one mounted under the longest
    prefix the path starts with, told apart by the path's first segment where several share
    that prefix (OpenAI's /v1, Triton's /v2, Databricks' /serving-endpoints ...)."""

    def __init__(self) -> None:
        self._by_segment: dict[tuple[str, str], Inbound] = {}
        self._by_prefix: dict[str, list[Inbound]] = {}

    def add(self, prefix: str, inbound: Inbound) -> None:
        self._by_prefix.setdefault(prefix, []).append(inbound)
        for m in inbound.mounts:
            self._by_segment.setdefault((prefix, m.path.split("/")[1]), inbound)

    def owner(self, path: str) -> Inbound | None:
        for prefix in sorted(self._by_prefix, key=len, reverse=True):
            if prefix and path != prefix and not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) :]
            found = self._by_segment.get((prefix, rest.split("/")[1] if rest.startswith("/") else ""))
            if found is not None:
                return found
            if len(self._by_prefix[prefix]) == 1:
                return self._by_prefix[prefix][0]
        return None


def error_middleware(shapes: ErrorShapes):  # type: ignore[no-untyped-def]
    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        """Paths no route matched answer in the shape of the dialect mounted there; anything
        unforeseen still answers in JSON (never a traceback)."""
        try:
            return await handler(request)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            inbound = shapes.owner(request.path)
            if inbound is not None and e.status in (404, 405):
                what = "not served here" if e.status == 404 else "not allowed on this path"
                err = NotFound(f"{request.method} {request.path}: {what}", status=e.status)
                return reply_response(inbound.error_reply(err))
            return web.json_response({"error": f"{e.reason}: {request.method} {request.path}"}, status=e.status)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            return web.json_response({"error": "internal gateway error"}, status=500)

    return errors
