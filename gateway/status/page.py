"""The status page's HTTP side: `/ui/` (the page, its script and its style, all shipped in the
package), `/ui/api/state` (the JSON document the page's script asks for every second) and
`/ui/api/explain` (what `gateway explain` says of a request pasted into the page's form, for the
live configuration; nothing is sent to a backend).

When the configuration has API keys, the state asks for one as inference does (`Authorization:
Bearer`). A browser sends no such header when it loads a page, so the page itself holds no data
and is served to anyone; its script asks the user for a key once, keeps it in the tab's
sessionStorage (never in a URL or a cookie) and sends it with each request for the state. Every
answer forbids loading anything from elsewhere (Content-Security-Policy), framing and caching.
The page shows no backend's address: an explanation names the replica it would go to by its
backend and position, as the state does.
"""

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from typing import Any

from aiohttp import web

from gateway import jsonutil
from gateway.config import Config
from gateway.explain import ExplainError, Explanation, as_json, explain, render_text
from gateway.neutral.errors import GatewayError
from gateway.proxy.intake import check_auth
from gateway.recent import Recent
from gateway.status.state import document

PREFIX = "/ui"
ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/status.js": ("status.js", "text/javascript; charset=utf-8"),
    "/status.css": ("status.css", "text/css; charset=utf-8"),
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@functools.cache
def asset(name: str) -> bytes:
    return (resources.files("gateway.status") / "static" / name).read_bytes()


class StatusPage:
    """The page for whichever configuration `live` says is live (None, or one with `ui: false`:
    not served), with the figures `recent` holds."""

    def __init__(self, live: Callable[[], Config | None], recent: Recent, clock: Callable[[], float] = time.time):
        self.live = live
        self.recent = recent
        self.clock = clock
        self._keys: tuple[Config, dict[str, str] | None] | None = None
        self._made: tuple[Config, float, dict[str, Any]] | None = None

    def _config(self) -> Config:
        config = self.live()
        if config is None or not config.ui:
            raise web.HTTPNotFound()
        return config

    def _api_keys(self, config: Config) -> dict[str, str] | None:
        if self._keys is None or self._keys[0] is not config:
            keys = None if config.auth is None else dict.fromkeys(config.auth.keys(), "")
            self._keys = (config, keys)
        return self._keys[1]

    async def file(self, request: web.Request) -> web.Response:
        self._config()
        name, content_type = ASSETS[request.path.removeprefix(PREFIX)]
        return web.Response(body=asset(name), content_type=None, headers={**HEADERS, "Content-Type": content_type})

    def _denied(self, request: web.Request, config: Config) -> web.Response | None:
        """The 401 for a request without one of the configuration's API keys, if it has keys."""
        try:
            check_auth(request, self._api_keys(config))
        except GatewayError as e:
            body = {"error": {"message": e.message, "type": "authentication_error"}}
            headers = {"WWW-Authenticate": 'Bearer realm="gateway"'}
            return _json(body, e.status, headers)
        return None

    async def state(self, request: web.Request) -> web.Response:
        config = self._config()
        denied = self._denied(request, config)
        if denied is not None:
            return denied
        await self.recent.watched()
        return _json(self.document(config))

    async def explain(self, request: web.Request) -> web.Response:
        """`{"route": NAME, "path": P or null, "request": BODY}` (the body as the client would
        send it: a string, taken as its bytes, or any JSON value) to `{"text": ..., "explanation":
        ...}`, the command's text and JSON; a 400 saying what is wrong with the form."""
        config = self._config()
        denied = self._denied(request, config)
        if denied is not None:
            return denied
        limit = config.limits.max_body_bytes
        # The request is written as a JSON string in the form: room for its escapes.
        cap = 2 * limit
        if request.content_length is not None and request.content_length > cap:
            return _problem(f"the form is larger than {cap} bytes", 413)
        form = bytearray()
        try:
            async with asyncio.timeout(config.limits.client_body_timeout_s):
                async for chunk in request.content.iter_any():
                    form += chunk
                    if len(form) > cap:
                        return _problem(f"the form is larger than {cap} bytes", 413)
        except TimeoutError:
            return _problem("the form did not come in time", 408)
        try:
            asked = jsonutil.loads(bytes(form))
        except ValueError:
            return _problem("the form is not JSON")
        if not isinstance(asked, dict) or not isinstance(asked.get("route"), str):
            return _problem('the form needs "route" (a route\'s name) and "request" (the client\'s body)')
        path = asked.get("path") or None
        body = asked.get("request")
        if path is not None and not isinstance(path, str):
            return _problem('"path" is a path the route mounts, or null')
        raw = body.encode() if isinstance(body, str) else jsonutil.dumps(body)
        if len(raw) > limit:
            return _problem(f"the request is larger than limits.max_body_bytes ({limit} bytes)", 413)
        try:
            explained = _addressless(await explain(config, asked["route"], path, raw))
        except ExplainError as e:
            return _problem(str(e))
        return _json({"text": render_text(explained), "explanation": as_json(explained)})

    def document(self, config: Config) -> dict[str, Any]:
        """The state, made once per sample however many pages ask."""
        last = self.recent.times[-1] if self.recent.times else 0.0
        made = self._made
        if made is None or made[0] is not config or made[1] != last or not last:
            made = self._made = (config, last, document(config, self.recent, self.clock()))
        return made[2]


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    headers = {**HEADERS, **(headers or {})}
    return web.Response(status=status, body=jsonutil.dumps(body), content_type="application/json", headers=headers)


def _problem(message: str, status: int = 400) -> web.Response:
    return _json({"error": {"message": message, "type": "invalid_request_error"}}, status)


def _addressless(e: Explanation) -> Explanation:
    """The explanation with each upstream request's address (its URL, Host header and egress
    proxy) replaced by the replica's name: the page shows backends by name and position only."""
    where = f"({e.backend}, replica 0)"
    shown = tuple(
        replace(
            u,
            url=None if u.url is None else where,
            proxy=None if u.proxy is None else "(egress proxy)",
            headers=tuple((k, where if k.lower() == "host" else v) for k, v in u.headers),
        )
        for u in e.upstream
    )
    return replace(e, upstream=shown)


def add_routes(router: web.UrlDispatcher, page: StatusPage) -> None:
    async def to_page(request: web.Request) -> web.Response:
        page._config()
        raise web.HTTPFound(PREFIX + "/")

    router.add_get(PREFIX, to_page)
    for path in ASSETS:
        router.add_get(PREFIX + path, page.file)
    router.add_get(PREFIX + "/api/state", page.state)
    router.add_post(PREFIX + "/api/explain", page.explain)
