"""The status page's HTTP side: `/ui/` (the page, its script and its style, all shipped in the
package) and `/ui/api/state` (the JSON document the page's script asks for every second).

When the configuration has API keys, the state asks for one as inference does (`Authorization:
Bearer`). A browser sends no such header when it loads a page, so the page itself holds no data
and is served to anyone; its script asks the user for a key once, keeps it in the tab's
sessionStorage (never in a URL or a cookie) and sends it with each request for the state. Every
answer forbids loading anything from elsewhere (Content-Security-Policy), framing and caching.
"""

import functools
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

from aiohttp import web

from gateway import jsonutil
from gateway.config import Config
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

    async def state(self, request: web.Request) -> web.Response:
        config = self._config()
        try:
            check_auth(request, self._api_keys(config))
        except GatewayError as e:
            body = {"error": {"message": e.message, "type": "authentication_error"}}
            headers = {**HEADERS, "WWW-Authenticate": 'Bearer realm="gateway"'}
            return web.Response(
                status=e.status, body=jsonutil.dumps(body), content_type="application/json", headers=headers
            )
        await self.recent.watched()
        return web.Response(
            body=jsonutil.dumps(self.document(config)), content_type="application/json", headers=HEADERS
        )

    def document(self, config: Config) -> dict[str, Any]:
        """The state, made once per sample however many pages ask."""
        last = self.recent.times[-1] if self.recent.times else 0.0
        made = self._made
        if made is None or made[0] is not config or made[1] != last or not last:
            made = self._made = (config, last, document(config, self.recent, self.clock()))
        return made[2]


def add_routes(router: web.UrlDispatcher, page: StatusPage) -> None:
    async def to_page(request: web.Request) -> web.Response:
        page._config()
        raise web.HTTPFound(PREFIX + "/")

    router.add_get(PREFIX, to_page)
    for path in ASSETS:
        router.add_get(PREFIX + path, page.file)
    router.add_get(PREFIX + "/api/state", page.state)
