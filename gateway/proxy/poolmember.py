"""Pool-member mode (`metrics: {model_server_gauges: true}`): the gateway as the front door of a
model-server pod in an InferencePool, showing the pool's endpoint picker what it reads from a
vLLM pod (docs/deployment.md, "Two ways to scale", has the names and where they come from).

Running and waiting requests are the gateway's own count (the exchange handler and each backend's
admission Gate keep them). The KV cache's use is the backend's own figure: its Prometheus page is
read every SCRAPE_INTERVAL_S (never per request); each dialect's servers name that figure their
own way, and the dialect says which family of page theirs is (gateway.modelserver reads each).
A backend whose page gives no such figure (TGI, a public API, one that is down) has none
shown: absent, never made up.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from aiohttp import web

from gateway.codec.capabilities import KvCacheSource, KvSource
from gateway.config import Config
from gateway.modelserver import CacheCollector, KvCache, PageKind, read_page
from gateway.proxy.routing import Backend
from gateway.upstream import Fault, shown_url

log = logging.getLogger("gateway")

SCRAPE_INTERVAL_S = 1.0
SCRAPE_TIMEOUT_S = 2.0
MAX_PAGE_BYTES = 8 * 1024 * 1024


def kv_source(b: Backend) -> KvSource | None:
    """Which family of metrics page the backend's servers write, and where it is: its
    `metrics_url` when set, else where its dialect says its servers keep it. None for servers
    whose metrics have no KV-cache figure (TGI has queue and batch gauges only; Databricks
    serves none)."""
    outbound = b.outbound
    if not isinstance(outbound, KvCacheSource):
        return None
    source = outbound.kv_source(b.view, b.urls)
    if source is not None and b.conf.metrics_url:
        return KvSource(source.page, [(b.conf.metrics_url, "")])
    return source


def model_names(config: Config) -> dict[str, str]:
    """Backend name -> the `model_name` label of its gauges: the model its clients ask for, as
    vLLM labels by its served model name. That is the first `models` entry of the first route to
    it (config order), else the backend's `model`, else the backend's own name."""
    names: dict[str, str] = {}
    for r in config.routes:
        if r.backend not in names:
            b = config.backends[r.backend]
            names[r.backend] = r.models[0] if r.models else (b.model or r.backend)
    for name, b in config.backends.items():
        names.setdefault(name, b.model or name)
    return names


class Scraper:
    """Reads one backend's KV-cache figure every `interval_s` into the cache collector."""

    def __init__(
        self, backend: Backend, kind: PageKind, urls: Sequence[tuple[str, str]], model_name: str, cache: CacheCollector
    ) -> None:
        self.backend = backend
        self.kind = kind
        self.urls = list(urls)
        self.model_name = model_name
        self.cache = cache
        self._said: str | None = None  # what the log last said, so that it says each change once

    async def run(self, interval_s: float | None = None) -> None:
        try:
            while True:
                self.cache.set(self.model_name, self, await self.scrape())
                await asyncio.sleep(interval_s or SCRAPE_INTERVAL_S)
        finally:
            self.cache.set(self.model_name, self, None)

    async def scrape(self) -> KvCache | None:
        """The figure now: with several replicas, the fullest cache among those that give one."""
        found = await asyncio.gather(*(self._one(*u) for u in self.urls))
        readings = [r for r, _ in found if r is not None]
        if not readings:
            self._say(found[0][1] if found else "no metrics page", warn=True)
            return None
        self._say("read", warn=False)
        blocks = next((r for r in readings if r.block_size is not None), None)
        usage = max(r.usage for r in readings)
        return KvCache(usage, blocks.block_size, blocks.num_blocks) if blocks else KvCache(usage)

    async def _one(self, base: str, path: str) -> tuple[KvCache | None, str]:
        b = self.backend
        url = f"{path} at {shown_url(base)}" if path else shown_url(base)
        try:
            got = await b.get(base, path, limit=MAX_PAGE_BYTES, within=SCRAPE_TIMEOUT_S)
        except Fault as e:
            return None, f"{url} did not answer ({type(e).__name__})"
        if got.status != 200:
            return None, f"{url} answered {got.status}"
        if got.body is None:
            return None, f"{url} has a page longer than {MAX_PAGE_BYTES} bytes"
        reading = read_page(self.kind, got.body.decode("utf-8", "replace"))
        if reading is None:
            return None, f"{url} gives no KV-cache figure that {self.kind.name} servers give"
        return reading, "read"

    def _say(self, what: str, warn: bool) -> None:
        if what == self._said:
            return
        self._said = what
        if warn:
            log.warning("backend %s: no KV-cache figure for the pool's picker: %s", self.backend.name, what)
        else:
            log.info("backend %s: KV-cache use is read from its metrics (%s)", self.backend.name, self.kind.name)


def scrapers(backends: Sequence[Backend], names: dict[str, str], cache: CacheCollector) -> list[Scraper]:
    """One scraper per backend whose servers have a KV figure and whose metrics page is known."""
    out = []
    for b in backends:
        source = kv_source(b)
        if source is None:
            log.info("backend %s: no KV-cache figure for the pool's picker (its servers give none)", b.name)
            continue
        if not source.urls:
            log.info("backend %s: no KV-cache figure for the pool's picker until it has a metrics_url", b.name)
            continue
        out.append(Scraper(b, source.page, source.urls, names[b.name], cache))
    return out


def scraping(backends: Sequence[Backend], names: dict[str, str], cache: CacheCollector):  # type: ignore[no-untyped-def]
    """The app's cleanup context that reads each backend's KV-cache figure while the app lives
    (after the backends' sessions are open, and before they close)."""

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        # Made here, not before: a simulated backend's URL is known only once it runs.
        tasks = [asyncio.create_task(s.run()) for s in scrapers(backends, names, cache)]
        yield
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    return ctx
