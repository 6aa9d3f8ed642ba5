"""`create_app(config)`: backends, routes, mounted dialects, ops endpoints and lifetimes.

Each backend has its own pool of connections; the pools and the in-process simulated backends
live in the app's cleanup_ctx, so tests and the CLI share one lifecycle.

A serving process may run several apps one after another, one per configuration it loads
(gateway.lifecycle): those share one `Metrics`, and what belongs to the process rather than to a
configuration (the event-loop lag watch, a separate metrics listener) runs in `process_metrics`.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.adapters import template_for, tokenizer_for
from gateway.config import Config
from gateway.dialects import registry
from gateway.health import READINESS, Readiness, healthz, readyz
from gateway.logs import install_redaction
from gateway.metrics import CONTENT_TYPE, Metrics, multiprocess_dir, watch_loop_lag
from gateway.neutral.errors import GatewayError
from gateway.proxy import poolmember
from gateway.proxy.engine import ProxyEngine
from gateway.proxy.exchange import SERVICES, Services
from gateway.proxy.mounting import ErrorShapes, error_middleware, mount
from gateway.proxy.routing import Backend, Route, RouteGroup, build_backend
from gateway.redact import REDACT, secret_header_values
from gateway.simulator.server import create_sim_app
from gateway.upstream import AnswerBudget

if TYPE_CHECKING:
    from gateway.tracing import Tracing

log = logging.getLogger("gateway")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

BACKENDS = web.AppKey("backends", dict[str, Backend])
# The room all answers together may hold (limits.max_buffered_answer_bytes), shared by the routes.
ANSWERS = web.AppKey("answers", AnswerBudget)


def create_app(config: Config, metrics: Metrics | None = None) -> web.Application:
    """The gateway app for `config`. Given `metrics`, the caller owns them and runs their
    process-wide parts itself (`process_metrics`); otherwise the app makes and runs its own."""
    shapes = ErrorShapes()
    app = web.Application(client_max_size=config.limits.max_body_bytes, middlewares=[error_middleware(shapes)])
    own_metrics = metrics is None
    if metrics is None:
        metrics = Metrics()
    # Secrets are known from here on: scrub them from every log record, whoever logs it.
    install_redaction()
    REDACT.add(config.auth.keys() if config.auth else ())
    for conf in config.backends.values():
        REDACT.add(secret_header_values(conf.headers))
    svc = Services.of(metrics, config.limits, config.auth.keys() if config.auth else None)
    svc.trusted_proxies = config.listen.proxy_networks()
    svc.objectives = dict(config.inference_objectives)
    app[SERVICES] = svc
    tracing = svc.tracing = _tracing(config)
    backends = {name: build_backend(name, b, registry.get(b.dialect)) for name, b in config.backends.items()}
    for b in backends.values():
        REDACT.add(b.egress.secrets())  # its proxy's credentials, from its config or the environment
    app[BACKENDS] = backends
    pool_member = config.metrics.model_server_gauges and metrics.enabled
    if pool_member:
        # The vLLM-named gauges of each backend, under the model name its clients use.
        names = poolmember.model_names(config)
        gauges = metrics.model_server()
        for b in backends.values():
            b.load = gauges.load(names[b.name])
    for b in backends.values():
        _watch_backend(b, metrics)
    readiness = Readiness(list(backends.values()))
    app[READINESS] = readiness

    groups: dict[tuple[str, str], RouteGroup] = {}
    answers = app[ANSWERS] = AnswerBudget(config.limits.max_buffered_answer_bytes)
    for r in config.routes:
        b = backends[r.backend]
        engine = ProxyEngine(b, config.limits.max_answer_bytes, answers, tracing)
        route = Route(r.name, r.dialect, r.prefix, frozenset(r.models) if r.models else None, b, engine)
        key = (r.dialect, r.prefix)
        groups.setdefault(key, RouteGroup(r.dialect, r.prefix, [], readiness.all_ready)).routes.append(route)
    for (dialect, prefix), group in groups.items():
        inbound = registry.get(dialect).inbound
        mount(app.router, prefix, group, inbound)
        shapes.add(prefix, inbound)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)

    if config.metrics.port is None:
        app.router.add_get(config.metrics.path, _metrics_handler(metrics))
    elif own_metrics:
        app.cleanup_ctx.append(_metrics_listener(config, _metrics_handler(metrics)))

    if tracing is not None:
        app.cleanup_ctx.append(_traces(tracing))  # stopped after the backends' connections
    simulated = [b for b in backends.values() if b.conf.simulate]
    if simulated:
        app.cleanup_ctx.append(_simulated_backends(simulated))
    app.cleanup_ctx.append(_client_pools(list(backends.values())))
    if pool_member:
        app.cleanup_ctx.append(poolmember.scraping(list(backends.values()), names, gauges.cache))
    if own_metrics:
        app.cleanup_ctx.append(_loop_lag(metrics))
    with_tokenizer = [b for b in backends.values() if b.conf.tokenizer]
    if with_tokenizer:
        app.on_startup.append(_preload_tokenizers(with_tokenizer))
    return app


@contextlib.asynccontextmanager
async def process_metrics(config: Config, metrics: Metrics) -> AsyncIterator[None]:
    """For apps made with a shared `metrics`: the event-loop lag watch, and the separate metrics
    listener when `metrics.port` is set (on the port and path `config` gives)."""
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(_watching_loop_lag(metrics))
        if config.metrics.port is not None:
            await stack.enter_async_context(_serving_metrics(config, _metrics_handler(metrics)))
        yield


def _metrics_handler(metrics: Metrics) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    return handler


def _watch_backend(b: Backend, metrics: Metrics) -> None:
    """The backend's replica states and queue length, as metrics."""
    if not metrics.enabled:
        return
    up = metrics.replica_up

    def changed(replica: int, is_up: bool) -> None:
        up.labels(b.name, str(replica)).set(1 if is_up else 0)

    b.health.watch(changed)
    if b.gate is not None:
        queued = metrics.queued.labels(b.name)
        load = b.load
        if load is None:
            b.gate.watch(queued.set)
            return

        def on_queue(n: int) -> None:
            queued.set(n)
            load.queued(n)  # vllm:num_requests_waiting

        b.gate.watch(on_queue)


def _tracing(config: Config) -> "Tracing | None":
    """The app's tracer when the config turns tracing on. Only then is OpenTelemetry imported."""
    if config.tracing is None:
        return None
    from gateway.tracing import Tracing

    conf = config.tracing
    return Tracing(conf.otlp_endpoint, conf.sample_ratio, conf.service_name)


def _traces(tracing: "Tracing"):  # type: ignore[no-untyped-def]
    """The tracer's provider and exporter, from the app's start to its end, when the spans still
    queued are exported."""

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        tracing.start()
        log.info("tracing: spans go to %s (sampled at %g)", tracing.shown, tracing.sample_ratio)
        yield
        await tracing.stop()

    return ctx


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


def _client_pools(backends: list[Backend]):  # type: ignore[no-untyped-def]
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        for b in backends:
            b.open_pool()
        yield
        for b in backends:
            await b.client().close()
            b.pool = None

    return ctx


@contextlib.asynccontextmanager
async def _watching_loop_lag(metrics: Metrics) -> AsyncIterator[None]:
    task = asyncio.create_task(watch_loop_lag(metrics.loop_lag))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        # What was recorded last, into the values the process leaves behind (a worker's stay
        # in the shared folder for the others' scrapes).
        metrics.flush()


def _loop_lag(metrics: Metrics):  # type: ignore[no-untyped-def]
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        async with _watching_loop_lag(metrics):
            yield

    return ctx


@contextlib.asynccontextmanager
async def _serving_metrics(config: Config, handler: Handler) -> AsyncIterator[None]:
    mapp = web.Application()
    mapp.router.add_get(config.metrics.path, handler)
    runner = web.AppRunner(mapp, access_log=None)
    await runner.setup()
    try:
        # Worker processes share the metrics port as they share the main one; any of them
        # answers a scrape with the aggregate of all.
        shared = multiprocess_dir() is not None
        await web.TCPSite(runner, config.listen.host, config.metrics.port, reuse_port=shared or None).start()
        log.info("metrics on http://%s:%s%s", config.listen.host, config.metrics.port, config.metrics.path)
        yield
    finally:
        await runner.cleanup()


def _metrics_listener(config: Config, handler: Handler):  # type: ignore[no-untyped-def]
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        async with _serving_metrics(config, handler):
            yield

    return ctx
