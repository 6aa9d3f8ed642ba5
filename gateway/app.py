"""`create_app(config)`: backends, routes, mounted dialects, ops endpoints and lifetimes.

Each backend has its own pooled ClientSession; the sessions and the in-process simulated
backends live in the app's cleanup_ctx, so tests and the CLI share one lifecycle.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from gateway.adapters import template_for, tokenizer_for
from gateway.config import Config
from gateway.dialects import registry
from gateway.health import READINESS, Readiness, healthz, readyz
from gateway.logs import install_redaction
from gateway.metrics import CONTENT_TYPE, Metrics, multiprocess_dir, watch_loop_lag
from gateway.neutral.errors import GatewayError
from gateway.proxy.engine import ProxyEngine
from gateway.proxy.exchange import SERVICES, Services
from gateway.proxy.mounting import ErrorShapes, error_middleware, mount
from gateway.proxy.routing import Backend, Route, RouteGroup, build_backend
from gateway.redact import REDACT, secret_header_values
from gateway.simulator.server import create_sim_app

log = logging.getLogger("gateway")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

BACKENDS = web.AppKey("backends", dict[str, Backend])


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
    backends = {name: build_backend(name, b, registry.get(b.dialect)) for name, b in config.backends.items()}
    app[BACKENDS] = backends
    readiness = Readiness(list(backends.values()))
    app[READINESS] = readiness

    groups: dict[tuple[str, str], RouteGroup] = {}
    for r in config.routes:
        b = backends[r.backend]
        route = Route(r.name, r.dialect, r.prefix, frozenset(r.models) if r.models else None, b, ProxyEngine(b))
        key = (r.dialect, r.prefix)
        groups.setdefault(key, RouteGroup(r.dialect, r.prefix, [], readiness.all_ready)).routes.append(route)
    for (dialect, prefix), group in groups.items():
        inbound = registry.get(dialect).inbound
        mount(app.router, prefix, group, inbound)
        shapes.add(prefix, inbound)

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
        for b in backends:
            for loader in (tokenizer_for, template_for):
                with contextlib.suppress(GatewayError):  # the adapter has logged what is wrong
                    loader(b.view)

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
