"""`create_app(config)`: backends, routes, mounted dialects, ops endpoints and lifetimes.

Each backend has its own pool of connections; the pools and the in-process simulated backends
live in the app's cleanup_ctx, so tests and the CLI share one lifecycle.

A serving process may run several apps one after another, one per configuration it loads
(gateway.lifecycle): those share one `Metrics`, and what belongs to the process rather than to a
configuration (the event-loop lag watch, a separate metrics listener) runs in `process_metrics`.
The status page (gateway.status) is on the metrics listener when there is one, else on the app's.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.adapters import template_for, tokenizer_for
from gateway.codec.contract import StateStore
from gateway.config import Config, route_paths
from gateway.dialects import registry
from gateway.health import READINESS, Readiness, healthz, readyz
from gateway.logs import install_redaction
from gateway.metrics import CONTENT_TYPE, Metrics, multiprocess_dir, watch_loop_lag
from gateway.neutral.errors import GatewayError
from gateway.proxy import poolmember
from gateway.proxy.engine import ProxyEngine
from gateway.proxy.mounting import ErrorShapes, error_middleware, mount
from gateway.proxy.routing import Backend, Route, RouteGroup, build_backend
from gateway.proxy.services import SERVICES, Services
from gateway.proxy.state import Closes, make_store
from gateway.redact import REDACT, secret_header_values
from gateway.simulator.server import create_sim_app
from gateway.status import page as status_page
from gateway.upstream import AnswerBudget

if TYPE_CHECKING:
    from gateway.tracing import Tracing

log = logging.getLogger("gateway")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

BACKENDS = web.AppKey("backends", dict[str, Backend])
LiveConfig = Callable[[], Config | None]
# The room all answers together may hold (limits.max_buffered_answer_bytes), shared by the routes.
ANSWERS = web.AppKey("answers", AnswerBudget)


def create_app(config: Config, metrics: Metrics | None = None, store: StateStore | None = None) -> web.Application:
    """The gateway app for `config`. Given `metrics`, the caller owns them and runs their
    process-wide parts itself (`process_metrics`); otherwise the app makes and runs its own.
    Given `store`, what stateful APIs keep outlives the app (a reload keeps it)."""
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
    tracing = _tracing(config)
    kept = store if store is not None else make_store(config.responses_store)
    if store is None and isinstance(kept, Closes):
        app.on_cleanup.append(_closing(kept))
    app[SERVICES] = Services.of(
        metrics,
        config.limits,
        config.auth.keys() if config.auth else None,
        trusted_proxies=config.listen.proxy_networks(),
        objectives=config.inference_objectives,
        store=kept,
        tracing=tracing,
    )
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
        assert inbound is not None, "the config lets a route take only a dialect with its inbound half"
        mount(app.router, prefix, group, inbound)
        shapes.add(prefix, inbound)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)

    if config.metrics.port is None:
        app.router.add_get(config.metrics.path, _metrics_handler(metrics))
        mounted = [config.metrics.path, *(p for paths in route_paths(config).values() for _, p in paths)]
        if config.ui and _page_fits(mounted):
            status_page.add_routes(app.router, status_page.StatusPage(lambda: config, metrics.recent))
    elif own_metrics:
        app.cleanup_ctx.append(_metrics_listener(config, metrics, lambda: config))

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
async def process_metrics(config: Config, metrics: Metrics, live: LiveConfig | None = None) -> AsyncIterator[None]:
    """For apps made with a shared `metrics`: the event-loop lag watch, and the separate metrics
    listener when `metrics.port` is set (on the port and path `config` gives), with the status
    page of the configuration `live` says is live (by default `config`)."""
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(_watching_loop_lag(metrics))
        if config.metrics.port is not None:
            await stack.enter_async_context(_serving_metrics(config, metrics, live or (lambda: config)))
        yield


def _page_fits(paths: list[str]) -> bool:
    """Whether the status page can be served beside these paths (the port's routes, metrics):
    none of them may be under its prefix, whose owner keeps it (and a warning says so)."""
    prefix = status_page.PREFIX
    taken = [p for p in paths if p == prefix or p.startswith(prefix + "/")]
    if taken:
        log.warning("the status page is not served: %s is mounted there, under its %s/", taken[0], prefix)
    return not taken


def _metrics_handler(metrics: Metrics) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    return handler


def _watch_backend(b: Backend, metrics: Metrics) -> None:
    """The backend's replica states and queue length, as metrics."""
    if not metrics.enabled:
        return
    up, until = metrics.replica_up, metrics.replica_ejected_until

    def changed(replica: int, is_up: bool) -> None:
        up.labels(b.name, str(replica)).set(1 if is_up else 0)
        until.labels(b.name, str(replica)).set(0 if is_up else time.time() + b.health.back_in(replica))

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
            # No access line of its own: the gateway's line for the request is enough.
            sim = create_sim_app(
                b.conf.dialect, options=b.conf.options, access_log=False, tool_parser=b.conf.tool_parser
            )
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
        await metrics.recent.close()
        # What was recorded last, into the values the process leaves behind (a worker's stay
        # in the shared folder for the others' scrapes).
        metrics.flush()


def _loop_lag(metrics: Metrics):  # type: ignore[no-untyped-def]
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        async with _watching_loop_lag(metrics):
            yield

    return ctx


@contextlib.asynccontextmanager
async def _serving_metrics(config: Config, metrics: Metrics, live: LiveConfig) -> AsyncIterator[None]:
    mapp = web.Application()
    mapp.router.add_get(config.metrics.path, _metrics_handler(metrics))
    if _page_fits([config.metrics.path]):
        status_page.add_routes(mapp.router, status_page.StatusPage(live, metrics.recent))
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


def _metrics_listener(config: Config, metrics: Metrics, live: LiveConfig):  # type: ignore[no-untyped-def]
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        async with _serving_metrics(config, metrics, live):
            yield

    return ctx


def _closing(store: Closes) -> Callable[[web.Application], Awaitable[None]]:
    async def close(app: web.Application) -> None:
        await store.aclose()

    return close
