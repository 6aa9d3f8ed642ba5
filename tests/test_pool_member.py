"""Pool-member mode: the gateway as a model-server pod's front door in an InferencePool.

The endpoint picker of the Gateway API Inference Extension (now llm-d's router) reads, from each
pod's /metrics, the gauges `vllm:num_requests_running`, `vllm:num_requests_waiting` and
`vllm:kv_cache_usage_perc` (and the `block_size`/`num_gpu_blocks` labels of
`vllm:cache_config_info`), taking the first series of each name it finds. These tests read the
gateway's metrics the way it does (the text parsed, the family's type and labels checked), while
requests are held running and queued; check that the pool's priority reaches the queue; that the
pool's headers reach the backend; and how each kind of backend's own metrics page is read.
"""

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from prometheus_client.parser import text_string_to_metric_families

from gateway import modelserver
from gateway.config import ConfigError, parse_config
from gateway.dialects import registry
from gateway.metrics import MULTIPROC_ENV
from gateway.modelserver import KvCache
from gateway.neutral.types import Request, Task
from gateway.proxy import poolmember
from gateway.proxy.admission import priority_of
from gateway.proxy.plan import POOL_HEADERS
from gateway.proxy.routing import build_backend
from tests.support import FakeUpstream, Recorded, json_reply, start_workers

PAGES = Path(__file__).parent / "fixtures" / "poolmember"
MODEL = "qwen2.5-7b"
ANSWER = {
    "id": "c",
    "object": "chat.completion",
    "created": 1,
    "model": MODEL,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
KV, CACHE_INFO = "vllm:kv_cache_usage_perc", "vllm:cache_config_info"


def pool_config(url: str, **backend: Any) -> dict[str, Any]:
    return {
        "metrics": {"model_server_gauges": True},
        "inference_objectives": {"premium": 5, "batch": -2},
        "backends": {"up": {"dialect": "openai", "url": url, "model": MODEL, **backend}},
        "routes": [{"name": "chat", "dialect": "openai", "backend": "up"}],
    }


def chat(text: str) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}]}


async def picker_view(gw: Any) -> dict[str, Any]:
    """The gateway's metrics as the picker parses them: family name -> family."""
    resp = await gw.get("/metrics")
    assert resp.status == 200
    return {f.name: f for f in text_string_to_metric_families(await resp.text())}


def series(families: dict[str, Any], name: str) -> list[tuple[dict[str, str], float]]:
    family = families.get(name)
    return [] if family is None else [(dict(s.labels), s.value) for s in family.samples]


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait (boundedly) for `check` to hold; no assertion on how long it took."""
    for _ in range(500):
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


class Held:
    """An upstream that holds each chat request (named by its message) until released by name."""

    def __init__(self, upstream: FakeUpstream) -> None:
        self.arrived: list[str] = []
        self._gates: dict[str, asyncio.Event] = {}
        upstream.reply = self.reply

    def _gate(self, name: str) -> asyncio.Event:
        return self._gates.setdefault(name, asyncio.Event())

    async def reply(self, request: web.Request, rec: Recorded) -> web.StreamResponse:
        name = rec.json["messages"][0]["content"]
        self.arrived.append(name)
        await self._gate(name).wait()
        return web.json_response(ANSWER)

    def release(self, name: str) -> None:
        self._gate(name).set()


# ---- running and waiting, and the queue's order -------------------------------------------------


async def test_running_and_waiting_gauges_429s_and_the_queue_order(upstream, make_gateway):
    held = Held(upstream)
    gw = await make_gateway(pool_config(upstream.url, max_concurrent=2, max_queued=3, queue_timeout_s=60))

    async def gauges() -> tuple[float, float]:
        fams = await picker_view(gw)
        for name in (RUNNING, WAITING):
            assert fams[name].type == "gauge"
            [(labels, _)] = series(fams, name)
            assert labels == {"model_name": MODEL}
        return series(fams, RUNNING)[0][1], series(fams, WAITING)[0][1]

    async def arrived(n: int) -> bool:
        return len(held.arrived) == n

    async def waiting(n: int) -> bool:
        return (await gauges())[1] == n

    assert await gauges() == (0, 0)
    tasks = {}

    def send(name: str, headers: dict[str, str] | None = None) -> None:
        tasks[name] = asyncio.create_task(gw.post("/v1/chat/completions", json=chat(name), headers=headers))

    send("a")
    await until(lambda: arrived(1), "a reaches the backend")
    send("b")
    await until(lambda: arrived(2), "b reaches the backend")
    # Three queue, one at a time so that their arrival order is known: low first, premium last.
    send("low", {"X-Gateway-Priority": "5"})
    await until(lambda: waiting(1), "low queues")
    send("high", {"X-Gateway-Priority": "1"})
    await until(lambda: waiting(2), "high queues")
    send("premium", {"x-llm-d-inference-objective": "premium"})  # priority 5: ahead of X-Gateway-Priority 1
    await until(lambda: waiting(3), "premium queues")
    assert await gauges() == (2, 3)
    # The queue is full: the sixth and seventh are turned away at once, with when to come back.
    for extra in ("f", "g"):
        resp = await gw.post("/v1/chat/completions", json=chat(extra))
        assert resp.status == 429 and resp.headers["Retry-After"] == "1"
        assert "queue is full" in (await resp.json())["error"]["message"]
    assert await gauges() == (2, 3)
    assert held.arrived == ["a", "b"]
    # Each slot that frees goes to the first in the queue by priority, then by arrival.
    for done, served_next, n in (("a", "premium", 3), ("b", "high", 4), ("premium", "low", 5)):
        held.release(done)
        await until(lambda n=n: arrived(n), f"{served_next} reaches the backend")  # type: ignore[misc]
        assert held.arrived[-1] == served_next
    for name in ("high", "low"):
        held.release(name)
    for name, task in tasks.items():
        assert (await task).status == 200, name
    assert await gauges() == (0, 0)


async def test_a_backend_without_a_queue_still_counts_its_running_requests(upstream, make_gateway):
    held = Held(upstream)
    gw = await make_gateway(pool_config(upstream.url))  # no max_concurrent: no Gate

    async def running(n: float) -> bool:
        fams = await picker_view(gw)
        return series(fams, RUNNING) == [({"model_name": MODEL}, n)] and series(fams, WAITING) == [
            ({"model_name": MODEL}, 0)
        ]

    tasks = [asyncio.create_task(gw.post("/v1/chat/completions", json=chat(f"r{i}"))) for i in range(3)]
    await until(lambda: running(3), "three running")
    for i in range(3):
        held.release(f"r{i}")
    assert [(await t).status for t in tasks] == [200, 200, 200]
    await until(lambda: running(0), "none running")


async def test_without_pool_member_mode_there_are_no_vllm_names(upstream, make_gateway):
    config = pool_config(upstream.url, max_concurrent=2)
    config["metrics"] = {}
    gw = await make_gateway(config)
    text = await (await gw.get("/metrics")).text()
    assert "vllm:" not in text


def test_model_name_is_what_clients_ask_for():
    config = parse_config(
        {
            "backends": {
                "a": {"dialect": "openai", "url": "http://a", "model": "served-a"},
                "b": {"dialect": "tgi", "url": "http://b"},
                "c": {"dialect": "tgi", "url": "http://c", "model": "served-c"},
                "d": {"dialect": "tgi", "url": "http://d"},
            },
            "routes": [
                {"name": "r1", "dialect": "openai", "backend": "a", "models": ["qwen", "qwen-chat"]},
                {"name": "r2", "dialect": "openai", "backend": "a", "models": ["other"]},
                {"name": "r3", "dialect": "tgi", "backend": "b"},
                {"name": "r4", "dialect": "tgi", "backend": "c", "prefix": "/c"},
            ],
        }
    )
    assert poolmember.model_names(config) == {"a": "qwen", "b": "b", "c": "served-c", "d": "d"}


# ---- priority ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "rank"),
    [
        ({}, 3),
        ({"X-Gateway-Priority": "1"}, 1),
        ({"x-llm-d-inference-objective": "premium"}, -2),  # InferenceObjective priority 5
        ({"X-Gateway-Inference-Objective": "premium"}, -2),  # the extension's older name
        ({"x-gateway-inference-objective": "batch"}, 5),  # priority -2: behind the default
        ({"x-llm-d-inference-objective": "unknown", "X-Gateway-Priority": "4"}, 4),
        ({"x-llm-d-inference-objective": "premium", "X-Gateway-Priority": "5"}, -2),
    ],
)
def test_the_objectives_priority_orders_the_queue_with_the_gateways_own(headers, rank):
    request = make_mocked_request("POST", "/v1/chat/completions", headers=headers)
    req = Request(task=Task.CHAT, wire="openai", model=MODEL)
    assert priority_of(request.headers, req, {"premium": 5, "batch": -2}) == rank


# ---- the pool's headers reach the backend --------------------------------------------------------

POOL = {
    "x-llm-d-inference-objective": "premium",
    "x-gateway-inference-objective": "premium",
    "x-llm-d-inference-fairness-id": "tenant-a",
    "x-gateway-inference-fairness-id": "tenant-a",
    "x-llm-d-model-name-rewrite": "qwen-lora-7",
    "x-gateway-model-name-rewrite": "qwen-lora-7",
    "x-gateway-destination-endpoint": "10.0.0.5:8080",
}
OTHERS = {
    "X-Custom-Thing": "1",
    "Authorization": "Bearer the-clients-own",
    "Cookie": "session=1",
    "req-id": "7",
    "req-type": "prefill",
    "X-Gateway-Priority": "2",
    "X-Forwarded-For": "192.0.2.9",
}


def received(rec: Recorded) -> dict[str, str]:
    return {k.lower(): v for k, v in rec.headers.items()}


def test_the_pass_through_list_is_the_pools_headers():
    assert set(POOL) == set(POOL_HEADERS)


async def test_pool_headers_reach_the_backend_and_no_other_client_header_does(upstream, make_gateway):
    upstream.reply = json_reply(ANSWER)
    gw = await make_gateway(pool_config(upstream.url))
    resp = await gw.post("/v1/chat/completions", json=chat("same-wire"), headers={**POOL, **OTHERS})
    assert resp.status == 200
    got = received(upstream.last)
    assert {k: got.get(k) for k in POOL} == POOL
    assert not {k.lower() for k in OTHERS} & set(got)
    # the request id still goes
    assert got["x-request-id"] == resp.headers["X-Request-Id"]


async def test_each_upstream_request_of_a_fan_out_carries_them(upstream, make_gateway):
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.json_response(
            {"generated_text": " ok", "details": {"finish_reason": "length", "generated_tokens": 1}}
        )

    upstream.reply = reply
    config = pool_config(upstream.url)
    config["backends"]["up"] = {"dialect": "tgi", "url": upstream.url}
    gw = await make_gateway(config)
    body = {"model": MODEL, "prompt": ["a", "b"], "max_tokens": 1}
    resp = await gw.post("/v1/completions", json=body, headers={**POOL, **OTHERS})
    assert resp.status == 200
    assert len(upstream.requests) == 2
    for rec in upstream.requests:
        got = received(rec)
        assert {k: got.get(k) for k in POOL} == POOL
        assert not {k.lower() for k in OTHERS} & set(got)


# ---- the KV cache's use, from each kind of backend's own metrics ---------------------------------


@pytest.mark.parametrize(
    ("page", "kind", "expected"),
    [
        ("vllm.txt", modelserver.VLLM_PAGE, KvCache(0.4375, 16, 27904)),
        ("vllm_legacy.txt", modelserver.VLLM_PAGE, KvCache(0.0625)),
        ("sglang.txt", modelserver.VLLM_PAGE, KvCache(0.71, 1, 120000)),
        ("triton_trtllm.txt", modelserver.TRTLLM_PAGE, KvCache(0.3125, 64, 6240)),
        ("triton_trtllm_blocks.txt", modelserver.TRTLLM_PAGE, KvCache(0.25, 128, 3120)),
        ("mindie.txt", modelserver.MINDIE_PAGE, KvCache(0.58)),
    ],
)
def test_each_backends_page_gives_its_kv_cache_use(page, kind, expected):
    assert modelserver.read_page(kind, (PAGES / page).read_text()) == expected


def test_a_page_without_the_figure_gives_none_rather_than_a_guess():
    tgi = (PAGES / "tgi.txt").read_text()
    for kind in (modelserver.VLLM_PAGE, modelserver.TRTLLM_PAGE, modelserver.MINDIE_PAGE):
        assert modelserver.read_page(kind, tgi) is None
    # Another server's page is not read as this one's, and a figure that is no fraction is none.
    assert modelserver.read_page(modelserver.VLLM_PAGE, (PAGES / "mindie.txt").read_text()) is None
    assert modelserver.read_page(modelserver.MINDIE_PAGE, 'npu_cache_usage_perc{model_name="m"} 58\n') is None
    assert modelserver.read_page(modelserver.VLLM_PAGE, "<html>not metrics</html>\n") is None


@pytest.mark.parametrize(
    ("dialect", "options", "kind"),
    [
        ("openai", {}, modelserver.VLLM_PAGE),
        ("openai", {"extensions": "vllm"}, modelserver.VLLM_PAGE),
        ("triton", {}, modelserver.TRTLLM_PAGE),
        ("triton", {"flavor": "vllm"}, modelserver.VLLM_PAGE),
        ("triton", {"flavor": "mindie"}, modelserver.MINDIE_PAGE),
        ("mindie", {}, modelserver.MINDIE_PAGE),
        ("tgi", {}, None),  # TGI's queue and batch gauges say nothing of its KV cache
        ("databricks", {}, None),
    ],
)
def test_which_reader_a_backend_gets(dialect, options, kind):
    backend = {"dialect": dialect, "url": "http://b:1", "model": "m", "options": options}
    conf = parse_config({"backends": {"b": backend}, "routes": [{"name": "r", "dialect": "openai", "backend": "b"}]})
    source = poolmember.kv_source(build_backend("b", conf.backends["b"], registry.get(dialect)))
    assert (source.page if source else None) is kind


VLLM_OPTIONS = {"extensions": "vllm"}
TRITON_PAGE = "/metrics"


@pytest.mark.parametrize(
    ("backend", "urls"),
    [
        ({"dialect": "openai", "url": "http://vllm:8000", "options": VLLM_OPTIONS}, [("http://vllm:8000", "/metrics")]),
        ({"dialect": "openai", "url": "unix:/run/v.sock", "options": VLLM_OPTIONS}, [("unix:/run/v.sock", "/metrics")]),
        ({"dialect": "openai", "url": "https://api.openai.com"}, []),  # the public API has none
        (
            {"dialect": "triton", "urls": ["http://t0:8000", "http://t1:8000"]},
            [("http://t0:8002/", TRITON_PAGE), ("http://t1:8002/", TRITON_PAGE)],
        ),
        ({"dialect": "triton", "url": "http://t0:8000/p?k=v"}, [("http://t0:8002/?k=v", TRITON_PAGE)]),
        ({"dialect": "triton", "url": "unix:/run/triton.sock"}, []),  # a socket has no metrics port
        ({"dialect": "mindie", "url": "http://127.0.0.1:1025"}, []),  # only MindIE's own config knows
        (
            {"dialect": "mindie", "url": "http://127.0.0.1:1025", "metrics_url": "https://127.0.0.1:1027/metrics"},
            [("https://127.0.0.1:1027/metrics", "")],
        ),
    ],
)
def test_where_a_backends_metrics_page_is(backend, urls):
    conf = parse_config({"backends": {"b": backend}, "routes": [{"name": "r", "dialect": "openai", "backend": "b"}]})
    b = build_backend("b", conf.backends["b"], registry.get(backend["dialect"]))
    source = poolmember.kv_source(b)
    assert source is not None and list(source.urls) == urls


def test_metrics_url_must_be_a_url():
    config = pool_config("http://up", metrics_url="localhost:8002/metrics")
    with pytest.raises(ConfigError) as e:
        parse_config(config)
    assert e.value.lines == ["backends.up.metrics_url: not an http(s) or unix-socket URL: 'localhost:8002/metrics'"]


async def test_the_backends_kv_figure_reaches_the_picker_and_leaves_with_it(upstream, make_gateway, monkeypatch):
    monkeypatch.setattr(poolmember, "SCRAPE_INTERVAL_S", 0.05)
    page: dict[str, Any] = {"status": 200, "text": (PAGES / "vllm.txt").read_text()}

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        assert rec.path == "/metrics" and rec.method == "GET"
        return web.Response(status=page["status"], text=page["text"], content_type="text/plain")

    upstream.reply = reply
    gw = await make_gateway(pool_config(upstream.url, options={"extensions": "vllm"}))

    async def kv_shows(value: float | None) -> bool:
        got = series(await picker_view(gw), KV)
        return got == ([] if value is None else [({"model_name": MODEL}, value)])

    await until(lambda: kv_shows(0.4375), "the KV figure appears")
    fams = await picker_view(gw)
    assert fams[KV].type == "gauge" and fams[CACHE_INFO].type == "gauge"
    assert series(fams, CACHE_INFO) == [({"block_size": "16", "model_name": MODEL, "num_gpu_blocks": "27904"}, 1.0)]
    page["text"] = page["text"].replace("0.4375", "0.875")
    await until(lambda: kv_shows(0.875), "the KV figure follows the backend's")
    page["status"] = 503  # the backend stops saying: the picker is told nothing, not an old figure
    await until(lambda: kv_shows(None), "the KV figure goes away")
    assert CACHE_INFO not in await picker_view(gw)


async def test_a_metrics_page_that_comes_in_pieces_is_read_whole(upstream, make_gateway, monkeypatch):
    # A real vLLM page is tens of kilobytes: it comes in several TCP segments, and the KV line
    # may be in any of them.
    monkeypatch.setattr(poolmember, "SCRAPE_INTERVAL_S", 0.05)
    text = ("# a comment line to push the figure past the first segment\n" * 4000).encode()
    text += (PAGES / "vllm.txt").read_bytes()

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        await resp.write(text[: len(text) // 2])
        await asyncio.sleep(0.02)
        await resp.write(text[len(text) // 2 :])
        return resp

    upstream.reply = reply
    gw = await make_gateway(pool_config(upstream.url, options={"extensions": "vllm"}))

    async def kv_shows() -> bool:
        return series(await picker_view(gw), KV) == [({"model_name": MODEL}, 0.4375)]

    await until(kv_shows, "the KV figure appears")


# ---- several worker processes --------------------------------------------------------------------


async def test_worker_processes_sum_running_requests_and_each_reads_the_kv_figure(
    aiohttp_server, tmp_path, unused_tcp_port
):
    """`gateway serve --workers 2` in pool-member mode: held requests spread over both workers
    are summed by any scrape, and whichever worker answers shows the backend's KV figure."""
    up = FakeUpstream()
    server = await aiohttp_server(up.app())
    up.url = str(server.make_url("")).rstrip("/")
    release = asyncio.Event()
    vllm_page = (PAGES / "vllm.txt").read_text()

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        if rec.path == "/metrics":
            return web.Response(text=vllm_page, content_type="text/plain")
        await release.wait()
        return web.json_response(ANSWER)

    up.reply = reply
    config = tmp_path / "gw.yaml"
    config.write_text(
        "metrics: {model_server_gauges: true}\n"
        f"backends:\n  up: {{dialect: openai, url: '{up.url}', model: {MODEL}, options: {{extensions: vllm}}}}\n"
        "routes:\n  - {name: chat, dialect: openai, backend: up}\n"
    )
    env = {k: v for k, v in os.environ.items() if k != MULTIPROC_ENV}
    port = unused_tcp_port
    proc, _ = await start_workers(config, port, env)
    base = f"http://127.0.0.1:{port}"
    n = 6
    try:
        # A fresh connection per request, so the kernel spreads them over the workers.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:

            async def view() -> dict[str, Any]:
                async with session.get(f"{base}/metrics") as r:
                    return {f.name: f for f in text_string_to_metric_families(await r.text())}

            async def shows(running: float) -> bool:
                fams = await view()
                return series(fams, RUNNING) == [({"model_name": MODEL}, running)] and series(fams, KV) == [
                    ({"model_name": MODEL}, 0.4375)
                ]

            tasks = [
                asyncio.create_task(session.post(f"{base}/v1/chat/completions", json=chat("hi"))) for _ in range(n)
            ]
            await until(lambda: shows(n), f"{n} running over both workers, and the KV figure")
            release.set()
            for t in tasks:
                resp = await t
                assert resp.status == 200
                await resp.read()
            await until(lambda: shows(0), "none running")
    finally:
        release.set()
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(proc.wait(), 30)
    assert code == 0
