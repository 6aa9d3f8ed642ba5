"""Pool-member mode (`metrics: {model_server_gauges: true}`): the gateway as the front door of a
model-server pod in an InferencePool, showing the pool's endpoint picker what it reads from a
vLLM pod (docs/deployment.md, "Two ways to scale", has the names and where they come from).

Running and waiting requests are the gateway's own count (the exchange handler and each backend's
admission Gate keep them). The KV cache's use is the backend's own figure: its Prometheus page is
read every SCRAPE_INTERVAL_S (never per request), and each dialect's servers name that figure
their own way, so each has a reader here. A backend whose page gives no such figure (TGI, a public
API, one that is down) has none shown: absent, never made up.
"""

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable, Sequence

from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from yarl import URL

from gateway.config import Config
from gateway.modelserver import CacheCollector, KvCache
from gateway.proxy.routing import Backend
from gateway.records import record
from gateway.upstream import Fault, shown_url

log = logging.getLogger("gateway")

SCRAPE_INTERVAL_S = 1.0
SCRAPE_TIMEOUT_S = 2.0
MAX_PAGE_BYTES = 8 * 1024 * 1024
# Triton serves its metrics on a port of their own (tritonserver --metrics-port, 8002 by default).
TRITON_METRICS_PORT = 8002

# Sample name -> the samples of that name a page holds (finite values only).
Samples = dict[str, list[Sample]]
Reader = Callable[[Samples], KvCache | None]


def _fraction(samples: Samples, name: str) -> float | None:
    """The fullest of the series called `name` (several engines or models: the one the picker
    should fear most), when it is a fraction; None when there is none or it is out of range."""
    values = [s.value for s in samples.get(name, ())]
    if not values:
        return None
    v = max(values)
    return v if 0.0 <= v <= 1.0 else None


def _int_label(sample: Sample, label: str) -> int | None:
    value = sample.labels.get(label, "")
    return int(value) if value.isdigit() else None


def read_vllm(samples: Samples) -> KvCache | None:
    """vLLM (`vllm:kv_cache_usage_perc`, before 0.9 `vllm:gpu_cache_usage_perc`; block size and
    count as labels of `vllm:cache_config_info`) and SGLang (`sglang:token_usage`, with
    `sglang:cache_config_info{page_size, num_pages}`)."""
    for usage_name, info_name, size, count in (
        ("vllm:kv_cache_usage_perc", "vllm:cache_config_info", "block_size", "num_gpu_blocks"),
        ("vllm:gpu_cache_usage_perc", "vllm:cache_config_info", "block_size", "num_gpu_blocks"),
        ("sglang:token_usage", "sglang:cache_config_info", "page_size", "num_pages"),
    ):
        usage = _fraction(samples, usage_name)
        if usage is None:
            continue
        for info in samples.get(info_name, ()):
            return KvCache(usage, _int_label(info, size), _int_label(info, count))
        return KvCache(usage)
    return None


TRTLLM_BLOCKS = "nv_trt_llm_kv_cache_block_metrics"


def read_trtllm(samples: Samples) -> KvCache | None:
    """Triton's TensorRT-LLM backend: `nv_trt_llm_kv_cache_block_metrics`, one series per
    `kv_cache_block_type`: `fraction` (newer releases), else `used` over `max`; `tokens_per` is
    the block size and `max` the number of blocks."""
    by_type: dict[str, float] = {}
    for s in samples.get(TRTLLM_BLOCKS, ()):
        kind = s.labels.get("kv_cache_block_type", "")
        by_type[kind] = max(by_type.get(kind, s.value), s.value)
    usage = by_type.get("fraction")
    if usage is None and by_type.get("max") and "used" in by_type:
        usage = by_type["used"] / by_type["max"]
    if usage is None or not 0.0 <= usage <= 1.0:
        return None
    size, count = by_type.get("tokens_per"), by_type.get("max")
    return KvCache(usage, int(size) if size else None, int(count) if count else None)


def read_mindie(samples: Samples) -> KvCache | None:
    """MindIE's service metrics (MIES_SERVICE_MONITOR_MODE=1): `npu_cache_usage_perc`, the
    share of NPU KV-cache blocks in use. It says nothing of the block size."""
    usage = _fraction(samples, "npu_cache_usage_perc")
    return None if usage is None else KvCache(usage)


@record
class Kind:
    """What one family of servers says of its KV cache, and how to read it."""

    name: str
    names: frozenset[str]  # the metric names the reader looks at; the rest of a page is skipped
    read: Reader


VLLM = Kind(
    "vllm",
    frozenset(
        {
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "vllm:cache_config_info",
            "sglang:token_usage",
            "sglang:cache_config_info",
        }
    ),
    read_vllm,
)
TRTLLM = Kind("trtllm", frozenset({TRTLLM_BLOCKS}), read_trtllm)
MINDIE = Kind("mindie", frozenset({"npu_cache_usage_perc"}), read_mindie)


def kind_of(dialect: str, options: dict[str, object]) -> Kind | None:
    """The servers a backend of this dialect (and options) is: None for those whose metrics have
    no KV-cache figure (TGI has queue and batch gauges only; Databricks serves none)."""
    if dialect == "openai":
        return VLLM
    if dialect == "mindie":
        return MINDIE
    if dialect == "triton":
        return {"trtllm": TRTLLM, "vllm": VLLM, "mindie": MINDIE}.get(str(options.get("flavor", "trtllm")))
    return None


def metrics_urls(b: Backend) -> list[tuple[str, str]]:
    """Where the backend's metrics page is, as a URL and the path under it: `metrics_url` when
    set, else where its servers keep it by default: a vLLM-style OpenAI server on its own port,
    Triton on each replica's metrics port (not on a unix socket, which has no ports). MindIE's is
    on its management address and `metricsPort`, which only its config knows, and the public
    OpenAI API has none: those need `metrics_url`."""
    if b.conf.metrics_url:
        return [(b.conf.metrics_url, "")]
    options = b.view.options.model_dump()
    if b.conf.dialect == "openai" and options.get("extensions") == "vllm":
        return [(u, "/metrics") for u in b.urls]
    if b.conf.dialect == "triton":
        tcp = [URL(u) for u in b.urls if URL(u).scheme in ("http", "https")]
        return [(str(u.with_port(TRITON_METRICS_PORT).with_path("/", keep_query=True)), "/metrics") for u in tcp]
    return []


def parse_page(text: str, names: frozenset[str]) -> Samples:
    """The samples of `names` on a Prometheus text page. Only their lines are parsed: a vLLM page
    is mostly histograms, and the parser is pure Python."""
    keep: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2] in names:
                keep.append(line)
        elif line.partition("{")[0].partition(" ")[0] in names:
            keep.append(line)
    out: Samples = {}
    for family in text_string_to_metric_families("\n".join(keep) + "\n"):
        for sample in family.samples:
            if math.isfinite(sample.value):
                out.setdefault(sample.name, []).append(sample)
    return out


def read_page(kind: Kind, text: str) -> KvCache | None:
    """The KV-cache figure a page of `kind`'s servers gives; None when it gives none."""
    try:
        return kind.read(parse_page(text, kind.names))
    except ValueError:  # not a Prometheus text page
        return None


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
        self, backend: Backend, kind: Kind, urls: Sequence[tuple[str, str]], model_name: str, cache: CacheCollector
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
            async with asyncio.timeout(SCRAPE_TIMEOUT_S):
                resp = await b.client().request(
                    b.target(base, path), "GET", b.headers, None, connect_timeout=None, timeout=None
                )
                try:
                    if resp.status != 200:
                        return None, f"{url} answered {resp.status}"
                    body = await resp.prefix(MAX_PAGE_BYTES)  # the whole page, not its first segment
                finally:
                    resp.release()
        except (TimeoutError, Fault) as e:
            return None, f"{url} did not answer ({type(e).__name__})"
        reading = read_page(self.kind, body.decode("utf-8", "replace"))
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
        kind = kind_of(b.conf.dialect, b.view.options.model_dump())
        if kind is None:
            log.info("backend %s: no KV-cache figure for the pool's picker (its servers give none)", b.name)
            continue
        urls = metrics_urls(b)
        if not urls:
            log.info("backend %s: no KV-cache figure for the pool's picker until it has a metrics_url", b.name)
            continue
        out.append(Scraper(b, kind, urls, names[b.name], cache))
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
