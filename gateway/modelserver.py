"""The vLLM-named gauges of pool-member mode (`metrics: {model_server_gauges: true}`): what the
Gateway API Inference Extension's endpoint picker reads from a model-server pod. Requests running
and waiting are the gateway's own count; the KV cache's use is the backend's own figure, from its
metrics page, which each family of servers writes its own way (the page readers here; each
backend dialect says which family its servers are, and gateway.proxy.poolmember reads the
page). docs/deployment.md has the names, what each
counts and where they come from.
"""

import math
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from gateway.records import record


@record
class KvCache:
    """What a backend's own metrics say of its KV cache: the fraction in use (0 to 1), and the
    block size (tokens) and number of blocks where it says them."""

    usage: float
    block_size: int | None = None
    num_blocks: int | None = None


class CacheCollector(Collector):
    """`vllm:kv_cache_usage_perc` and `vllm:cache_config_info`, per model name, from the last
    reading of each backend's own metrics. Not kept in prometheus-client's value store: every
    worker process reads the backend itself, and a scrape answers with what the answering worker
    read last; a figure the backend stopped giving disappears instead of staying at its last value."""

    def __init__(self) -> None:
        # model name -> (whose reading it is, the reading)
        self._readings: dict[str, tuple[object, KvCache]] = {}

    def set(self, model_name: str, owner: object, reading: KvCache | None) -> None:
        """`owner`'s reading for `model_name`; None takes the figure away (only `owner`'s own)."""
        if reading is not None:
            self._readings[model_name] = (owner, reading)
        elif model_name in self._readings and self._readings[model_name][0] is owner:
            del self._readings[model_name]

    def get(self, model_name: str) -> KvCache | None:
        held = self._readings.get(model_name)
        return None if held is None else held[1]

    def collect(self) -> Iterator[Metric]:
        if not self._readings:
            return
        usage = GaugeMetricFamily(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels=["model_name"]
        )
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=["block_size", "model_name", "num_gpu_blocks"],
        )
        for name, (_, kv) in sorted(self._readings.items()):
            usage.add_metric([name], kv.usage)
            if kv.block_size is not None and kv.num_blocks is not None:
                info.add_metric([str(kv.block_size), name, str(kv.num_blocks)], 1.0)
        yield usage
        if info.samples:
            yield info


class BackendLoad:
    """One backend's running and waiting requests, as the vLLM-named gauges of its model name."""

    __slots__ = ("_queued", "running", "waiting")

    def __init__(self, running: Gauge, waiting: Gauge) -> None:
        self.running = running
        self.waiting = waiting
        self._queued = 0

    def queued(self, n: int) -> None:
        """The backend's queue is now `n` long. Counted as a change, so that two configuration
        generations serving at once (a reload) add up rather than overwrite each other."""
        self.waiting.inc(n - self._queued)
        self._queued = n


class ModelServerGauges:
    """What the Inference Extension's endpoint picker reads from a vLLM pod: requests running and
    waiting (the gateway's own count, summed over worker processes) and the KV cache's use (the
    backend's own figure), labelled `model_name` as vLLM labels them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # livesum: with worker processes each counts its own requests, and the pod's are the sum.
        self.running = Gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            ["model_name"],
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            ["model_name"],
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.cache = CacheCollector()
        registry.register(self.cache)

    def load(self, model_name: str) -> BackendLoad:
        return BackendLoad(self.running.labels(model_name), self.waiting.labels(model_name))


# ---- what model servers' metrics pages say of their KV cache -------------------------------

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
class PageKind:
    """What one family of servers says of its KV cache on its metrics page, and how to read it."""

    name: str
    names: frozenset[str]  # the metric names the reader looks at; the rest of a page is skipped
    read: Reader


VLLM_PAGE = PageKind(
    "vLLM or SGLang",
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
TRTLLM_PAGE = PageKind("TensorRT-LLM", frozenset({TRTLLM_BLOCKS}), read_trtllm)
MINDIE_PAGE = PageKind("MindIE", frozenset({"npu_cache_usage_perc"}), read_mindie)


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


def read_page(kind: PageKind, text: str) -> KvCache | None:
    """The KV-cache figure a page of `kind`'s servers gives; None when it gives none."""
    try:
        return kind.read(parse_page(text, kind.names))
    except ValueError:  # not a Prometheus text page
        return None
