"""`create_app(config)`: backends, routes, mounted dialects, ops endpoints and lifetimes.

One aiohttp ClientSession with pooled connections serves every backend; it and the in-process
simulated backends live in the app's cleanup_ctx, so tests and the CLI share one lifecycle.
"""

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
from aiohttp import web

from gateway import dialects
from gateway.config import Backend as BackendConf
from gateway.config import Config
from gateway.core.engine import ProxyEngine, SessionRef
from gateway.core.exchange import SERVICES, Services
from gateway.core.routing import Backend, Route, RouteGroup, make_ssl
from gateway.health import READINESS, Readiness, healthz, readyz
from gateway.logs import REDACT, install_redaction, secret_header_values
from gateway.metrics import CONTENT_TYPE, Metrics, multiprocess_dir

log = logging.getLogger("gateway")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SESSION = web.AppKey("session", SessionRef)
BACKENDS = web.AppKey("backends", dict[str, Backend])


def build_backend(name: str, conf: BackendConf) -> Backend:
    dialect = dialects.get(conf.dialect)
    options = dialect.outbound.options_model.model_validate(conf.options)
    urls = [u.rstrip("/") for u in conf.targets()]
    return Backend(name, conf, dialect, options, urls, dict(conf.headers), make_ssl(conf.tls))


@web.middleware
async def plain_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Paths no dialect owns, and anything unforeseen, still answer in JSON (never a traceback)."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return web.json_response({"error": f"{e.reason}: {request.method} {request.path}"}, status=e.status)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return web.json_response({"error": "internal gateway error"}, status=500)


def create_app(config: Config) -> web.Application:
    app = web.Application(client_max_size=config.limits.max_body_bytes, middlewares=[plain_errors])
    metrics = Metrics()
    # Secrets are known from here on: scrub them from every log record, whoever logs it.
    install_redaction()
    REDACT.add(config.auth.keys() if config.auth else ())
    for conf in config.backends.values():
        REDACT.add(secret_header_values(conf.headers))
    app[SERVICES] = Services(
        metrics=metrics,
        api_keys=config.auth.keys() if config.auth else None,
        max_body_bytes=config.limits.max_body_bytes,
        max_concurrent=config.limits.max_concurrent_requests,
    )
    session = SessionRef()
    app[SESSION] = session
    backends = {name: build_backend(name, b) for name, b in config.backends.items()}
    app[BACKENDS] = backends

    groups: dict[tuple[str, str], RouteGroup] = {}
    for r in config.routes:
        b = backends[r.backend]
        route = Route(
            r.name, r.dialect, r.prefix, frozenset(r.models) if r.models else None, b, ProxyEngine(b, session)
        )
        groups.setdefault((r.dialect, r.prefix), RouteGroup(r.dialect, r.prefix, [])).routes.append(route)
    for (dialect, prefix), group in groups.items():
        dialects.get(dialect).inbound.mount(app.router, prefix, group)

    app[READINESS] = Readiness(list(backends.values()), session)
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
    app.cleanup_ctx.append(_client_session(session))
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


def _client_session(ref: SessionRef):  # type: ignore[no-untyped-def]
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=True) as session:
            ref.session = session
            yield
        ref.session = None

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
