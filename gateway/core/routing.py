"""Runtime routes and backends: which backend serves a request, and at which replica URL."""

from __future__ import annotations

import itertools
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from pydantic import BaseModel

from gateway import config as cfg
from gateway.core.errors import NotFound

if TYPE_CHECKING:
    from gateway.core.engine import Engine
    from gateway.dialects.base import Dialect


@dataclass(eq=False)
class Backend:
    name: str
    conf: cfg.Backend
    dialect: Dialect
    options: BaseModel
    urls: list[str]
    headers: dict[str, str]
    ssl_ctx: ssl.SSLContext | None = None
    _rr: itertools.count[int] = field(default_factory=itertools.count)
    # Adapters a dialect or the pipeline attaches (tokenizer, chat template), by name.
    extras: dict[str, Any] = field(default_factory=dict)
    # This backend's own connection pool (its connection limit, no cookies), opened with the app.
    session: aiohttp.ClientSession | None = None

    def client(self) -> aiohttp.ClientSession:
        assert self.session is not None, "client session used before app startup"
        return self.session

    def open_session(self) -> aiohttp.ClientSession:
        """The pool for this backend: at most `max_connections` open at once; no cookie jar, so a
        cookie one client's answer set is never replayed on another client's request."""
        connector = aiohttp.TCPConnector(
            limit=self.conf.max_connections, limit_per_host=0, ttl_dns_cache=300, enable_cleanup_closed=True
        )
        self.session = aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=True
        )
        return self.session

    @property
    def model(self) -> str | None:
        return self.conf.model

    def replicas(self) -> list[str]:
        """Replica URLs in the order to try them: round-robin start, the rest as failover."""
        n = len(self.urls)
        if n == 1:
            return [self.urls[0]]
        start = next(self._rr) % n
        return self.urls[start:] + self.urls[:start]


@dataclass(eq=False)
class Route:
    name: str
    dialect: str
    prefix: str
    models: frozenset[str] | None
    backend: Backend
    engine: Engine


@dataclass(eq=False)
class RouteGroup:
    """The routes of one inbound dialect under one prefix; told apart by the requested model."""

    dialect: str
    prefix: str
    routes: list[Route]

    def select(self, model: str | None) -> Route:
        if model is not None:
            for r in self.routes:
                if r.models is not None and model in r.models:
                    return r
        for r in self.routes:
            if r.models is None:
                return r
        if model is None:
            return self.routes[0]
        raise NotFound(
            f"The model {model!r} does not exist or is not served here", param="model", code="model_not_found"
        )

    def model_ids(self) -> list[str]:
        """Model names to list to clients: each route's `models`, else its backend's model."""
        ids: list[str] = []
        for r in self.routes:
            names: Sequence[str] = (
                sorted(r.models) if r.models else ([r.backend.model] if r.backend.model else [r.name])
            )
            for n in names:
                if n not in ids:
                    ids.append(n)
        return ids


def shown_url(url: str) -> str:
    """A replica URL without any user:password part, fit for logs and response bodies."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def make_ssl(tls: cfg.BackendTLS | None) -> ssl.SSLContext | None:
    if tls is None:
        return None
    ctx = ssl.create_default_context(cafile=tls.ca)
    if not tls.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if tls.cert:
        ctx.load_cert_chain(tls.cert, tls.key)
    return ctx
