"""The vLLM-named gauges of pool-member mode (`metrics: {model_server_gauges: true}`): what the
Gateway API Inference Extension's endpoint picker reads from a model-server pod. Requests running
and waiting are the gateway's own count; the KV cache's use is the backend's own figure, from its
metrics page (gateway.proxy.poolmember reads it). docs/deployment.md has the names, what each
counts and where they come from.
"""

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

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
