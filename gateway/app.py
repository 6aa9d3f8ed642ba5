"""`create_app(config)`: backends, routes, mounted dialects, ops endpoints and lifetimes.

One aiohttp ClientSession with pooled connections serves every backend; it and the in-process
simulated backends live in the app's cleanup_ctx, so tests and the CLI share one lifecycle.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from gateway import dialects
from gateway.config import Backend as BackendConf
from gateway.config import Config
from gateway.core.engine import ProxyEngine
from gateway.core.errors import NotFound
from gateway.core.exchange import SERVICES, Services
from gateway.core.routing import Backend, Route, RouteGroup, make_ssl
from gateway.dialects.base import Inbound
from gateway.health import READINESS, Readiness, healthz, readyz
from gateway.logs import install_redaction
from gateway.metrics import CONTENT_TYPE, Metrics, multiprocess_dir, watch_loop_lag
from gateway.redact import REDACT, secret_header_values

log = logging.getLogger("gateway")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

BACKENDS = web.AppKey("backends", dict[str, Backend])


def build_backend(name: str, conf: BackendConf) -> Backend:
    dialect = dialects.get(conf.dialect)
    options = dialect.outbound.options_model.model_validate(conf.options)
    urls = [u.rstrip("/") for u in conf.targets()]
    return Backend(name, conf, dialect, options, urls, dict(conf.headers), make_ssl(conf.tls))


class ErrorShapes:
    """Which dialect answers for a path no route matched: the one mounted under the longest
    prefix the path starts with, told apart by the path's first segment where several share
    that prefix (OpenAI's /v1, Triton's /v2, Databricks' /serving-endpoints ...)."""

    def __init__(self) -> None:
        self._by_segment: dict[tuple[str, str], Inbound] = {}
        self._by_prefix: dict[str, list[Inbound]] = {}

    def add(self, prefix: str, inbound: Inbound) -> None:
        self._by_prefix.setdefault(prefix, []).append(inbound)
        for _method, path in inbound.paths():
            self._by_segment.setdefault((prefix, path.split("/")[1]), inbound)

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
                return inbound.error_response(err)
            return web.json_response({"error": f"{e.reason}: {request.method} {request.path}"}, status=e.status)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            return web.json_response({"error": "internal gateway error"}, status=500)

    return errors


def create_app(config: Config) -> web.Application:
    shapes = ErrorShapes()
    app = web.Application(client_max_size=config.limits.max_body_bytes, middlewares=[error_middleware(shapes)])
    metrics = Metrics()
    # Secrets are known from here on: scrub them from every log record, whoever logs it.
    install_redaction()
    REDACT.add(config.auth.keys() if config.auth else ())
    for conf in config.backends.values():
        REDACT.add(secret_header_values(conf.headers))
    svc = Services.of(metrics, config.limits, config.auth.keys() if config.auth else None)
    svc.trusted_proxies = config.listen.proxy_networks()
    app[SERVICES] = svc
    backends = {name: build_backend(name, b) for name, b in config.backends.items()}
    app[BACKENDS] = backends

    groups: dict[tuple[str, str], RouteGroup] = {}
    for r in config.routes:
        b = backends[r.backend]
        route = Route(r.name, r.dialect, r.prefix, frozenset(r.models) if r.models else None, b, ProxyEngine(b))
        groups.setdefault((r.dialect, r.prefix), RouteGroup(r.dialect, r.prefix, [])).routes.append(route)
    for (dialect, prefix), group in groups.items():
        inbound = dialects.get(dialect).inbound
        inbound.mount(app.router, prefix, group)
        shapes.add(prefix, inbound)

    app[READINESS] = Readiness(list(backends.values()))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)

    async def metrics_handler(request: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    if config.metrics.port is None:
        app.router.add_get(config.metrics.path, metrics_handler)
    else:
        app.cleanup_ctx.append(_metrics_listener(config, metrics_handler))

    simulated = [b for b in backends.values() if b.conf.simulate]
    if simulated:
        app.cleanup_ctx.append(_simulated_backends(simulated))
    app.cleanup_ctx.append(_client_sessions(list(backends.values())))
    app.cleanup_ctx.append(_loop_lag(metrics))
    with_tokenizer = [b for b in backends.values() if b.conf.tokenizer]
    if with_tokenizer:
        app.on_startup.append(_preload_tokenizers(with_tokenizer))
    return app


def _simulated_backends(backends: list[Backend]):  # type: ignore[no-untyped-def]
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        from gateway.simulator.server import create_sim_app

        runners = []
        for b in backends:
            # The simulator imitates the server the backend's options describe (Triton's flavour).
            sim = create_sim_app(b.conf.dialect, options=b.conf.options)
            sim[SERVICES].access_log = False  # the gateway's own line for the request is enough
            runner = web.AppRunner(sim, handler_cancellation=True, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            b.urls = [f"http://127.0.0.1:{port}"]
            runners.append(runner)
        yield
        for runner in runners:
            await runner.cleanup()

    return ctx


def _preload_tokenizers(backends: list[Backend]):  # type: ignore[no-untyped-def]
    """Load each configured tokenizer and chat template now, so a wrong `tokenizer:` folder
    shows in the log at startup rather than on the first request that needs it. A failure only
    warns: the requests that need the files get a clear 400, the others are served."""

    async def load(app: web.Application) -> None:
        from gateway.adapters import template_for, tokenizer_for
        from gateway.core.errors import GatewayError

        for b in backends:
            for loader in (tokenizer_for, template_for):
                with contextlib.suppress(GatewayError):  # the adapter has logged what is wrong
                    loader(b)

    return load


def _client_sessions(backends: list[Backend]):  # type: ignore[no-untyped-def]
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        for b in backends:
            b.open_session()
        yield
        for b in backends:
            await b.client().close()
            b.session = None

    return ctx


def _loop_lag(metrics: Metrics):  # type: ignore[no-untyped-def]
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(watch_loop_lag(metrics.loop_lag))
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return ctx


def _metrics_listener(config: Config, handler: Handler):  # type: ignore[no-untyped-def]
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        mapp = web.Application()
        mapp.router.add_get(config.metrics.path, handler)
        runner = web.AppRunner(mapp, access_log=None)
        await runner.setup()
        # Worker processes share the metrics port as they share the main one; any of them
        # answers a scrape with the aggregate of all.
        shared = multiprocess_dir() is not None
        await web.TCPSite(runner, config.listen.host, config.metrics.port, reuse_port=shared or None).start()
        log.info("metrics on http://%s:%s%s", config.listen.host, config.metrics.port, config.metrics.path)
        yield
        await runner.cleanup()

    return ctx
