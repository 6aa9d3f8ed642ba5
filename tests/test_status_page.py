"""The status page (/ui/): its JSON state after traffic (each route's last minute, the backends'
replicas, what went wrong), the API key it asks for, where it is served and when not, and what
it never shows. The page in a real browser is tests/test_status_page_browser.py's."""

import asyncio
import math
import os
import signal
import socket
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway import jsonutil
from gateway.app import create_app
from gateway.config import parse_config
from gateway.explain import as_json, explain
from gateway.proxy.exchange import SERVICES
from gateway.proxy.replicas import Replicas
from gateway.recent import quantile
from gateway.simulator.server import create_sim_app
from tests.support import start_workers
from tests.test_lifecycle_drain import launch  # noqa: F401  (the fixture)
from tests.test_lifecycle_reload import write

ROOT = Path(__file__).resolve().parent.parent
SECRET_HEADER = "Bearer backend-secret-7f3a"


def _refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://user:pw@127.0.0.1:{s.getsockname()[1]}"


def _config(down: str, sims: tuple[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """Two working routes (OpenAI chat and TGI, each on a simulated backend: in the gateway, or
    at the URLs `sims`) and one whose backend's two replicas refuse connections."""
    where: list[dict[str, Any]] = [{"simulate": True}] * 2 if sims is None else [{"url": u} for u in sims]
    return {
        "backends": {
            "sim": {"dialect": "openai", **where[0]},
            "sim-tgi": {"dialect": "tgi", **where[1]},
            "down": {
                "dialect": "openai",
                "urls": [down, down],
                "retry_backoff_s": 0,
                "eject_base_s": 60,
                "headers": {"Authorization": SECRET_HEADER},
            },
        },
        "routes": [
            {"name": "chat", "dialect": "openai", "backend": "sim", "models": ["m"]},
            {"name": "gen", "dialect": "tgi", "backend": "sim-tgi", "prefix": "/tgi"},
            {"name": "broken", "dialect": "openai", "backend": "down", "models": ["broken"]},
        ],
        **extra,
    }


def _chat(model: str, stream: bool = False) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream, "max_tokens": 4}


async def _traffic(gw: Any) -> None:
    """Five requests on `chat` (two streamed), four on `gen` (two streamed, one refused), two on
    `broken`."""
    calls = [("/v1/chat/completions", _chat("m", stream=i < 2)) for i in range(5)]
    tgi = {"inputs": "hi", "parameters": {"max_new_tokens": 4}}
    calls += [("/tgi/generate_stream", tgi)] * 2 + [("/tgi/generate", tgi), ("/tgi/generate", {"inputs": 5})]
    calls += [("/v1/chat/completions", _chat("broken"))] * 2
    for path, body in calls:
        async with gw.post(path, json=body) as r:
            await r.read()


async def _until(ask: Any, done: Any, deadline_s: float = 30.0) -> dict[str, Any]:
    """The state once `done` says so (it is sampled every second), or what it was at the deadline."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    state: dict[str, Any] = await ask()
    while not done(state) and loop.time() < end:
        await asyncio.sleep(0.2)
        state = await ask()
    return state


async def _state(gw: Any, **headers: str) -> dict[str, Any]:
    r = await gw.get("/ui/api/state", headers=headers)
    assert r.status == 200, await r.text()
    state: dict[str, Any] = await r.json()
    return state


async def test_the_state_shows_each_routes_figures_replicas_and_errors_after_traffic(make_gateway, aiohttp_server):
    # Simulators that pause between tokens, so that streams have gaps between them.
    sims = [await aiohttp_server(create_sim_app(d, token_delay_s=0.002)) for d in ("openai", "tgi")]
    down = _refused_url()
    gw = await make_gateway(_config(down, (str(sims[0].make_url("")), str(sims[1].make_url("")))))
    recent = gw.app[SERVICES].metrics.recent
    await _state(gw)  # the page asks: sampling starts
    await recent.sample()
    await _traffic(gw)
    await recent.sample()
    state = await _state(gw)

    routes = {r["name"]: r for r in state["routes"]}
    assert list(routes) == ["chat", "gen", "broken"]
    chat, gen, broken = routes["chat"], routes["gen"], routes["broken"]
    assert (chat["dialect"], chat["backend"], chat["backend_dialect"]) == ("openai", "sim", "openai")
    assert {"method": "POST", "path": "/v1/chat/completions"} in chat["paths"]
    assert {"method": "POST", "path": "/tgi/generate_stream"} in gen["paths"]
    assert (chat["requests"], chat["errors"], chat["error_rate"]) == (5, 0, 0)
    assert (gen["requests"], gen["errors"]) == (4, 0)  # the refused one (TGI says 422) is not an error
    assert (broken["requests"], broken["errors"], broken["error_rate"]) == (2, 2, 1)
    for r in (chat, gen):
        assert r["rps"] > 0 and r["in_flight"] == 0
        # Streams went through both: their first tokens and the gaps between tokens.
        assert 0 < r["ttft_p50_s"] <= r["ttft_p95_s"]
        assert 0 < r["itl_p50_s"] <= r["itl_p95_s"]
        assert {len(v) for v in r["series"].values()} == {len(state["times"])}
        assert any(r["series"]["rps"])
    assert broken["ttft_p50_s"] is None

    backends = {b["name"]: b for b in state["backends"]}
    assert [r["state"] for r in backends["sim"]["replicas"]] == ["up"]
    ejected = backends["down"]["replicas"]
    assert [r["state"] for r in ejected] == ["ejected", "ejected"]
    assert all(r["back_at"] > state["now"] + 50 for r in ejected)  # eject_base_s: 60

    errors = {(e["class"], e["route"]): e["count"] for e in state["errors"]}
    assert errors == {("upstream connect", "broken"): 2, ("answered 502", "broken"): 2, ("answered 422", "gen"): 1}

    # Nothing secret: no replica address, no credential in it, no backend header.
    text = (await (await gw.get("/ui/api/state")).read()).decode()
    assert down.rsplit(":", 1)[1] not in text and "user:pw" not in text and "backend-secret" not in text


async def test_the_page_asks_for_the_inference_api_key(make_gateway):
    gw = await make_gateway(_config(_refused_url(), auth={"api_keys": ["k-status-1"]}))
    # The page, its script and style hold no data, and a browser cannot send a key loading them.
    for path in ("/ui/", "/ui/status.js", "/ui/status.css"):
        r = await gw.get(path)
        assert r.status == 200, path
        assert "default-src 'none'" in r.headers["Content-Security-Policy"]
    r = await gw.get("/ui/api/state")
    assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
    assert "routes" not in await r.text()
    r = await gw.get("/ui/api/state", headers={"Authorization": "Bearer wrong"})
    assert r.status == 401
    state = await _state(gw, Authorization="Bearer k-status-1")
    assert [r["name"] for r in state["routes"]] == ["chat", "gen", "broken"]
    assert "k-status-1" not in (await (await gw.get("/ui/", headers={"Authorization": "Bearer k-status-1"})).text())


async def test_the_explain_form_says_what_the_command_says_and_shows_no_address(make_gateway):
    """The page's form asks /ui/api/explain: the explanation `gateway explain` gives for the same
    request on the live configuration, behind the same key, with no backend address in it."""
    down = _refused_url()
    config = _config(down, auth={"api_keys": ["k-status-1"]})
    gw = await make_gateway(config)
    ask = {**_chat("broken"), "top_k": 5, "stop": ["END"]}
    form = {"route": "broken", "path": None, "request": jsonutil.dumps(ask).decode()}
    r = await gw.post("/ui/api/explain", json=form)
    assert r.status == 401
    key = {"Authorization": "Bearer k-status-1"}
    r = await gw.post("/ui/api/explain", json=form, headers=key)
    assert r.status == 200, await r.text()
    answer = await r.json()
    expected = as_json(await explain(parse_config(config), "broken", None, jsonutil.dumps(ask)))
    got = answer["explanation"]
    assert [u["body"] for u in got["upstream"]] == [u["body"] for u in expected["upstream"]]
    assert got["parameters"] == expected["parameters"] and got["error"] == expected["error"]
    top_k = next(p for p in got["parameters"] if p["name"] == "top_k")
    assert top_k["fate"] == "drop" and "top_k" in answer["text"]
    # The replica by its backend and position; no address, no credential.
    (upstream,) = got["upstream"]
    assert upstream["url"] == "(down, replica 0)"
    assert dict(map(tuple, upstream["headers"]))["Host"] == "(down, replica 0)"
    text = (await (await gw.post("/ui/api/explain", json=form, headers=key)).read()).decode()
    port = down.rsplit(":", 1)[1]
    assert port not in text and "user:pw" not in text and "backend-secret" not in text
    # A request the client would get refused is explained with that refusal.
    bad = {**form, "request": '{"model": "broken", "messages": "nope"}'}
    answer = await (await gw.post("/ui/api/explain", json=bad, headers=key)).json()
    assert answer["explanation"]["error"]["status"] == 400
    # What is wrong with the form itself is a 400 saying so; nothing is ever sent.
    for wrong, says in [
        ({"route": "nope", "request": "{}"}, "nope"),
        ({"route": "chat", "path": "/v1/nothing", "request": "{}"}, "/v1/nothing"),
        ({"request": "{}"}, "route"),
        ([1, 2], "route"),
    ]:
        r = await gw.post("/ui/api/explain", json=wrong, headers=key)
        assert r.status == 400 and says in (await r.json())["error"]["message"], wrong
    r = await gw.post("/ui/api/explain", data=b"{not json", headers=key)
    assert r.status == 400
    huge = {"route": "chat", "request": "x" * (5 << 20)}
    r = await gw.post("/ui/api/explain", json=huge, headers=key)
    assert r.status == 413, await r.text()


async def test_ui_false_serves_no_page(make_gateway):
    gw = await make_gateway(_config(_refused_url(), ui=False))
    for path in ("/ui", "/ui/", "/ui/status.js", "/ui/api/state"):
        assert (await gw.get(path)).status == 404, path


async def test_the_page_is_on_the_metrics_listener_when_it_has_a_port(aiohttp_client):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gw = await aiohttp_client(create_app(parse_config(_config(_refused_url(), metrics={"port": port}))))
    assert (await gw.get("/ui/api/state")).status == 404
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/ui") as r:
            assert r.status == 200 and r.url.path == "/ui/"
            assert "status.js" in await r.text()
        async with s.get(f"http://127.0.0.1:{port}/ui/api/state") as r:
            assert [x["name"] for x in (await r.json())["routes"]] == ["chat", "gen", "broken"]


async def test_a_route_under_ui_keeps_its_paths_and_the_page_steps_aside(make_gateway, caplog):
    config = _config(_refused_url())
    config["routes"][1]["prefix"] = "/ui"
    gw = await make_gateway(config)
    assert (await gw.get("/ui/api/state")).status == 404
    r = await gw.post("/ui/generate", json={"inputs": "hi", "parameters": {"max_new_tokens": 2}})
    assert r.status == 200
    assert "the status page is not served" in caplog.text


async def test_under_workers_any_worker_shows_the_whole_pods_figures(tmp_path):
    """With two worker processes, any worker's state counts every request, whichever served it."""
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "listen: {host: 127.0.0.1, port: 0}\nshutdown: {drain_delay_s: 0, grace_s: 1}\n"
        "backends: {sim: {dialect: openai, simulate: true}}\n"
        "routes: [{name: chat, dialect: openai, backend: sim}]\n"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    proc, _ = await start_workers(config, port, env)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as page:  # one connection: one worker answers the page

            async def state() -> dict[str, Any]:
                async with page.get(base + "/ui/api/state") as r:
                    return dict(await r.json())

            await _until(state, lambda s: s["samples"] >= 1)
            # Each request on a connection of its own, so that the kernel spreads them.
            for _ in range(20):
                fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
                async with fresh as s, s.post(base + "/v1/chat/completions", json=_chat("m")) as r:
                    assert r.status == 200
            final = await _until(state, lambda s: s["routes"][0]["requests"] >= 20)
            assert final["routes"][0]["requests"] == 20
            assert len(final["config"]["hashes"]) == 1 and final["config"]["loaded_at"] > 0
    finally:
        proc.terminate()
        await proc.wait()


async def test_the_metrics_listeners_page_follows_a_reload(launch, tmp_path):  # noqa: F811
    """On the metrics listener (started once), the page shows whichever configuration is live."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    head = (
        f"listen: {{host: 127.0.0.1, port: 0}}\nmetrics: {{port: {port}}}\n"
        "backends: {sim: {dialect: openai, simulate: true}}\nroutes:\n  - {name: chat, dialect: openai, backend: sim}\n"
    )
    config = tmp_path / "gateway.yaml"
    first = write(config, head)
    gateway, _ = await launch("serve", "--config", str(config))
    async with aiohttp.ClientSession() as page:

        async def state() -> dict[str, Any]:
            async with page.get(f"http://127.0.0.1:{port}/ui/api/state") as r:
                return dict(await r.json())

        before = await _until(state, lambda s: s["config"]["hashes"] == [first])
        assert [r["name"] for r in before["routes"]] == ["chat"]
        second = write(config, head + "  - {name: more, dialect: tgi, backend: sim, prefix: /tgi}\n")
        gateway.send(signal.SIGHUP)
        after = await _until(state, lambda s: s["config"]["hashes"] == [second])
        assert [r["name"] for r in after["routes"]] == ["chat", "more"]
        assert after["config"]["loaded_at"] > before["config"]["loaded_at"]
        write(config, head.replace("metrics:", "ui: false\nmetrics:"))
        gateway.send(signal.SIGHUP)
        await gateway.line("is live", after=len(gateway.lines))
        async with page.get(f"http://127.0.0.1:{port}/ui/api/state") as r:
            assert r.status == 404


@pytest.mark.parametrize(
    ("q", "want"),
    [(0.5, 0.1375), (0.95, 0.19375), (0.99, 0.19875), (0.1, 0.05)],
)
def test_quantiles_are_read_from_buckets_as_prometheus_reads_them(q, want):
    # 10 observations: 2 under 0.1, 8 between 0.1 and 0.2, none above; linear within a bucket.
    buckets = [(0.1, 2.0), (0.2, 10.0), (math.inf, 10.0)]
    assert quantile(q, buckets) == pytest.approx(want)
    # Past the last finite bound, its bound; nothing counted, nothing to say.
    assert quantile(0.99, [(0.1, 1.0), (math.inf, 10.0)]) == 0.1
    assert quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None


def test_the_page_ships_inside_the_package():
    """Every file of the package that is not Python is package data, so a wheel holds the page."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = [f"{package.replace('.', '/')}/{pattern}" for package, pats in data.items() for pattern in pats]
    loose = [p.relative_to(ROOT) for p in (ROOT / "gateway").rglob("*") if p.is_file()]
    loose = [p for p in loose if p.suffix not in (".py", ".pyc")]
    assert Path("gateway/status/static/status.js") in loose
    for p in loose:
        assert any(fnmatch(str(p), pattern) for pattern in patterns), p


def test_a_longer_ejection_is_told_with_when_the_replica_is_next_tried():
    """The watcher (the metrics, and so the page) hears of each ejection, and of each time a
    failed trial makes one longer, with the time left until the next trial."""
    now = [100.0]
    told: list[tuple[int, bool, float]] = []
    replicas = Replicas(2, eject_after=1, base_s=5, max_s=60, clock=lambda: now[0])
    replicas.watch(lambda i, up: told.append((i, up, replicas.back_in(i))))
    replicas.failed(1)
    now[0] += 6  # its time is up: the next order gives it a trial, which fails
    assert replicas.order()[0] == 1
    replicas.failed(1)
    replicas.succeeded(1)
    assert told == [(0, True, 0.0), (1, True, 0.0), (1, False, 5.0), (1, False, 10.0), (1, True, 0.0)]
