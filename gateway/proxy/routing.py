"""Runtime routes and backends: which backend serves a request, and at which replica URL."""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway import config as cfg
from gateway.codec.capabilities import ListsModels
from gateway.codec.contract import BackendView, Dialect, Outbound, Reply, RouteView
from gateway.modelserver import BackendLoad
from gateway.neutral.errors import NotFound
from gateway.proxy.admission import Gate
from gateway.proxy.plan import Engine
from gateway.proxy.replicas import Replicas
from gateway.upstream import DEFAULT_HEADERS, DIRECT, Egress, Pool, ReadTimeout, Target


@dataclass(frozen=True, slots=True)
class Got:
    """A backend's answer to a GET of its own (`Backend.get`)."""

    status: int
    content_type: str
    body: bytes | None  # None: longer than the reader's limit


@dataclass(eq=False)
class Backend:
    name: str
    conf: cfg.Backend
    outbound: Outbound[Any]
    view: BackendView[Any]
    urls: list[str]
    headers: dict[str, str]
    ssl_ctx: ssl.SSLContext | None = None
    # Which replicas take requests now (see gateway.proxy.replicas).
    health: Replicas = field(default_factory=lambda: Replicas(1))
    # The backend's own concurrency limit and queue, when it has one (backends.X.max_concurrent).
    gate: Gate | None = None
    # This backend's own connections (its connection limit), opened with the app.
    pool: Pool | None = None
    # Pool-member mode: its requests running and waiting, as vLLM-named gauges (else None).
    load: BackendLoad | None = None
    # Which proxy its connections go through, decided once (gateway.upstream.egress).
    egress: Egress = DIRECT

    @property
    def model(self) -> str | None:
        return self.view.model  # the config's, read from a record (a config model's reads cost more)

    def replicas(self) -> list[int]:
        """Replica indices (into `urls`) in the order to try them for one request."""
        return self.health.order()

    def target(self, base: str, path: str = "") -> Target:
        """Where a request for `path` under one of its URLs goes (a whole URL, without `path`)."""
        return Target.of(base, path, self.egress)

    def client(self) -> Pool:
        assert self.pool is not None, "backend connections used before app startup"
        return self.pool

    async def get(self, base: str, path: str, *, limit: int, within: float, connect_s: float | None = None) -> Got:
        """GET `path` under one of its URLs (a replica, its metrics page): the one way the gateway
        asks a backend anything of its own. The whole exchange, connection included, within
        `within` seconds (the connection within `connect_s`); the body read to its end, None
        when longer than `limit`. A Fault when no whole answer came (ReadTimeout in time)."""
        try:
            async with asyncio.timeout(within):
                resp = await self.client().request(
                    self.target(base, path), "GET", self.headers, None, connect_timeout=connect_s, timeout=None
                )
                try:
                    body = await resp.read(limit)
                finally:
                    resp.release()
        except ReadTimeout:
            raise
        except TimeoutError:
            raise ReadTimeout(f"no whole answer within {within:g}s") from None
        return Got(resp.status, resp.headers.get("Content-Type", "application/json"), body)

    def open_pool(self) -> Pool:
        """This backend's connections: at most `max_connections` in use at once. The client
        keeps no cookies, so one a backend sets is never replayed on another client's request."""
        self.pool = Pool(self.conf.max_connections, self.ssl_ctx)
        return self.pool


def build_backend(name: str, conf: cfg.Backend, dialect: Dialect) -> Backend:
    outbound = dialect.outbound
    assert outbound is not None, "the config lets a backend speak only a dialect with its outbound half"
    options = outbound.options_model.model_validate(conf.options)
    view = BackendView(name, conf.dialect, conf.model, options, conf.tokenizer, conf.tool_parser)
    urls = [u.rstrip("/") for u in conf.targets()]
    health = Replicas(max(len(urls), 1), conf.eject_after, conf.eject_base_s, conf.eject_max_s)
    gate = None
    if conf.max_concurrent is not None:
        gate = Gate(name, conf.max_concurrent, conf.max_queued, conf.queue_timeout_s)
    # What every request to it carries: the client's defaults, unless its own headers name them.
    own = {k.lower() for k in conf.headers}
    headers = {k: v for k, v in DEFAULT_HEADERS.items() if k.lower() not in own} | conf.headers
    backend = Backend(name, conf, outbound, view, urls, headers, make_ssl(conf.tls), health, gate)
    backend.egress = conf.egress(os.environ)
    return backend


@dataclass(eq=False)
class Route:
    name: str
    dialect: str
    prefix: str
    models: frozenset[str] | None
    backend: Backend
    engine: Engine

    @property
    def view(self) -> RouteView:
        return RouteView(self.name, self.backend.view, self.models)


# Whether every backend named has a ready replica (the app's readiness probe).
ReadyCheck = Callable[[Sequence[str]], Awaitable[bool]]


async def _always_ready(backends: Sequence[str]) -> bool:
    return True


@dataclass(eq=False)
class RouteGroup:
    """The routes of one inbound dialect under one prefix; told apart by the requested model."""

    dialect: str
    prefix: str
    routes: list[Route]
    ready_check: ReadyCheck = _always_ready

    def route(self, model: str | None) -> Route:
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


class GroupPaths:
    """A RouteGroup as a dialect's own paths see it (gateway.codec.contract.GroupView)."""

    __slots__ = ("_group",)

    def __init__(self, group: RouteGroup) -> None:
        self._group = group

    @property
    def routes(self) -> Sequence[RouteView]:
        return [r.view for r in self._group.routes]

    def select(self, model: str | None) -> RouteView:
        return self._group.route(model).view

    def model_ids(self) -> list[str]:
        return self._group.model_ids()

    async def ready(self, routes: Sequence[RouteView]) -> bool:
        return await self._group.ready_check([r.backend.name for r in routes])

    def _route(self, route: RouteView) -> Route:
        for r in self._group.routes:
            if r.name == route.name:
                return r
        raise NotFound(f"no route {route.name!r}")

    async def fetch(self, route: RouteView, path: str) -> Reply:
        return await self._route(route).engine.fetch(path)

    async def model_list(self, route: RouteView) -> Reply | None:
        r = self._route(route)
        outbound = r.backend.outbound
        if not isinstance(outbound, ListsModels):
            return None
        return await r.engine.fetch(outbound.models_path(r.backend.view))


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
