"""Reloading the configuration: SIGHUP (or `--watch-config`) reads the file again; a valid one
takes over new requests (routes, backends, keys, limits, the listener's certificate) while the
requests in flight finish on the old one; an invalid one is logged one line per problem, as at
start-up, and the old one stays. Real `gateway` processes and signals, and the Switch in-process."""

import asyncio
import os
import re
import signal
import ssl
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gateway.protocol import Guard
from gateway.reload import digest
from gateway.server import Listener, Switch, drain, start_app
from tests.support import issue_cert, write_pem
from tests.test_cli import gateway as gateway_command
from tests.test_lifecycle_drain import (
    chat,
    complete,
    launch,  # noqa: F401  (the fixture)
    simulator,
)
from tests.test_metrics import samples, value

SIM_FAST = "{dialect: openai, simulate: true}"


def config_text(
    *,
    keys: list[str],
    common_backend: str,
    sim_url: str,
    extra_route: str,
    extra: str = "",
) -> str:
    """`common` (model common) on a backend named `common_backend` at the slow simulator, and a
    route named (and taking the model) `extra_route` on an in-process simulated backend."""
    return (
        "listen: {host: 127.0.0.1, port: 0}\n"
        "shutdown: {drain_delay_s: 0, grace_s: 5}\n"
        f"auth: {{api_keys: [{', '.join(keys)}]}}\n"
        "backends:\n"
        f"  {common_backend}: {{dialect: openai, url: '{sim_url}'}}\n"
        f"  fast: {SIM_FAST}\n"
        "routes:\n"
        f"  - {{name: common, dialect: openai, backend: {common_backend}, models: [common]}}\n"
        f"  - {{name: {extra_route}, dialect: openai, backend: fast, models: [{extra_route}]}}\n" + extra
    )


def write(path: Path, text: str) -> str:
    """Replace the file at once, as editors and Kubernetes do; the hash it goes live under."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return digest(text.encode())


async def ask(
    s: aiohttp.ClientSession, url: str, model: str, key: str, stream: bool = False, **extra: Any
) -> tuple[int, bytes]:
    body = {**chat(stream, **extra), "model": model}
    headers = {"Authorization": f"Bearer {key}"}
    async with s.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
        return r.status, await r.read()


async def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        assert r.status == 200
        return samples(await r.text())


async def test_sighup_swaps_a_route_and_a_key_under_load(launch, tmp_path):  # noqa: F811
    sim = await simulator(launch, 30)  # streams and answers of about half a second
    conf = tmp_path / "gw.yaml"
    first = write(conf, config_text(keys=["shared", "old-key"], common_backend="one", sim_url=sim, extra_route="alpha"))
    gw, url = await launch("serve", "--config", str(conf))
    await gw.line(f"configuration {first} is live")

    results: list[tuple[float, float, int, bool]] = []  # start, end, status, whole
    stop = asyncio.Event()

    async def load(i: int) -> None:
        # Each loop keeps its connection alive across the reload.
        async with aiohttp.ClientSession() as s:
            n = 0
            while not stop.is_set():
                stream = (n + i) % 2 == 0
                t0 = time.monotonic()
                status, body = await ask(s, url, "common", "shared", stream=stream)
                whole = complete(body) if stream else b'"finish_reason":"stop"' in body
                results.append((t0, time.monotonic(), status, whole))
                n += 1

    async with aiohttp.ClientSession() as s:
        assert (await ask(s, url, "alpha", "old-key"))[0] == 200
        assert (await ask(s, url, "beta", "new-key"))[0] == 401
        assert (await ask(s, url, "beta", "shared"))[0] == 404
        loops = [asyncio.create_task(load(i)) for i in range(6)]
        await asyncio.sleep(1.0)
        second = write(
            conf, config_text(keys=["shared", "new-key"], common_backend="two", sim_url=sim, extra_route="beta")
        )
        gw.send(signal.SIGHUP)
        await gw.line(f"configuration {second} is live")
        live_at = time.monotonic()
        await asyncio.sleep(1.5)
        stop.set()
        await asyncio.gather(*loops)
        # The new key and route are in; the old ones are out.
        assert (await ask(s, url, "beta", "new-key"))[0] == 200
        status, body = await ask(s, url, "alpha", "new-key")
        assert status == 404 and b"model_not_found" in body
        assert (await ask(s, url, "beta", "old-key"))[0] == 401

    assert results and all(status == 200 and whole for _, _, status, whole in results), [
        r for r in results if r[2] != 200 or not r[3]
    ]
    assert any(t0 < live_at - 0.05 < t1 for t0, t1, _, _ in results)  # some spanned the swap
    assert sum(1 for t0, _, _, _ in results if t0 > live_at) >= 6
    s = await scrape(url)
    served = {"route": "common", "inbound": "openai", "outbound": "openai", "status": "200"}
    assert value(s, "gateway_requests_total", backend="one", **served) > 0
    assert value(s, "gateway_requests_total", backend="two", **served) > 0
    assert value(s, "gateway_config_loads_total", result="live") == 2
    assert value(s, "gateway_config_loads_total", result="rejected") == 0
    assert value(s, "gateway_config_info", hash=second) == 1
    assert not any(name == "gateway_config_info" and ("hash", first) in labels for name, labels in s)
    assert "Traceback" not in gw.log
    assert f"SIGHUP: reloading the configuration from {conf}" in gw.log


BAD = """
listen: {port: -1}
backends:
  up: {dialect: openai, simulate: true}
routes:
  - {name: chat, dialect: openai, backend: nope}
"""


def startup_lines(path: Path) -> list[str]:
    """The problems `gateway check-config` reports for a file, as start-up reports them."""
    r = gateway_command("check-config", str(path))
    assert r.returncode == 2
    return [ln for ln in r.stderr.splitlines() if ln.startswith("config error: ")]


def logged_problems(log: str, after: int = 0) -> list[str]:
    return [m.group(1) for m in re.finditer(r"ERROR gateway (config error: .*)", log[after:])]


async def test_an_invalid_config_on_sighup_keeps_the_live_one(launch, tmp_path):  # noqa: F811
    conf = tmp_path / "gw.yaml"
    good = write(conf, config_text(keys=["k"], common_backend="one", sim_url="http://127.0.0.1:9", extra_route="alpha"))
    gw, url = await launch("serve", "--config", str(conf))
    (tmp_path / "bad.yaml").write_text(BAD)
    expected = startup_lines(tmp_path / "bad.yaml")
    assert len(expected) == 2

    write(conf, BAD)
    gw.send(signal.SIGHUP)
    await gw.line(f"the configuration in {conf} was rejected; configuration {good} stays live")
    assert logged_problems(gw.log) == expected

    write(conf, "backends: {up: [unclosed\n")
    mark, seen = len(gw.log), len(gw.lines)
    gw.send(signal.SIGHUP)
    await gw.line("was rejected", after=seen)
    [problem] = logged_problems(gw.log, mark)
    assert problem.startswith(f"config error: {conf}: not valid YAML (line ")

    async with aiohttp.ClientSession() as s:
        assert (await ask(s, url, "alpha", "k"))[0] == 200
    s = await scrape(url)
    assert value(s, "gateway_config_loads_total", result="rejected") == 2
    assert value(s, "gateway_config_loads_total", result="live") == 1
    assert value(s, "gateway_config_info", hash=good) == 1
    assert "Traceback" not in gw.log


async def test_watch_config_picks_up_an_edit(launch, tmp_path):  # noqa: F811
    conf = tmp_path / "gw.yaml"
    sim_url = "http://127.0.0.1:9"
    write(conf, config_text(keys=["k"], common_backend="one", sim_url=sim_url, extra_route="alpha"))
    gw, url = await launch("serve", "--config", str(conf), "--watch-config")
    async with aiohttp.ClientSession() as s:
        assert (await ask(s, url, "beta", "k"))[0] == 404
        edited = write(conf, config_text(keys=["k"], common_backend="one", sim_url=sim_url, extra_route="beta"))
        await gw.line(f"configuration {edited} is live", timeout=10)
        assert f"{conf} changed: reloading" in gw.log
        assert (await ask(s, url, "beta", "k"))[0] == 200
        # A bad edit is reported once, not on every look at the file.
        write(conf, BAD)
        await gw.line("was rejected", timeout=10)
        await asyncio.sleep(2.5)  # past the next look at the file
        assert gw.log.count("was rejected") == 1
        assert (await ask(s, url, "beta", "k"))[0] == 200


async def test_sighup_with_workers_reloads_each_worker_and_reports_problems_once(launch, tmp_path):  # noqa: F811
    conf = tmp_path / "gw.yaml"
    sim_url = "http://127.0.0.1:9"
    write(conf, config_text(keys=["k"], common_backend="one", sim_url=sim_url, extra_route="alpha"))
    gw, url = await launch("serve", "--config", str(conf), "--workers", "2")
    edited = write(conf, config_text(keys=["k"], common_backend="one", sim_url=sim_url, extra_route="beta"))
    gw.send(signal.SIGHUP)
    await gw.lines_with(f"configuration {edited} is live", 2)  # one line from each worker
    # A connection per request: the kernel spreads them over both workers.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        for _ in range(12):
            assert (await ask(s, url, "beta", "k"))[0] == 200
    write(conf, BAD)
    gw.send(signal.SIGHUP)
    await gw.line("was rejected")
    assert len(logged_problems(gw.log)) == 2  # by the parent, once for both workers
    await asyncio.sleep(0.5)
    s = await scrape(url)
    # Counted in each worker, summed over both.
    assert value(s, "gateway_config_loads_total", result="live") == 4
    assert value(s, "gateway_config_loads_total", result="rejected") == 2
    assert value(s, "gateway_config_info", hash=edited) == 1
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s2:
        for _ in range(6):
            assert (await ask(s2, url, "beta", "k"))[0] == 200
    gw.send(signal.SIGTERM)
    assert await gw.exited(30) == 0
    assert "Traceback" not in gw.log


def _pki(folder: Path) -> dict[str, tuple[str, str]]:
    ca = issue_cert("reload CA")
    out = {"ca": write_pem(folder, "ca", ca)}
    for name in ("one", "two"):
        out[name] = write_pem(folder, name, issue_cert(name, ca, ["127.0.0.1"]))
    return out


async def _served_name(host: str, port: int, ca: str) -> str:
    ctx = ssl.create_default_context(cafile=ca)
    _, writer = await asyncio.open_connection(host, port, ssl=ctx)
    cert = writer.get_extra_info("peercert")
    writer.close()
    return str(dict(x[0] for x in cert["subject"])["commonName"])


async def _dribbled_headers(host: str, port: int, ca: str, size: int) -> bytes:
    """What the server answers to `size` bytes of headers that never end."""
    reader, writer = await asyncio.open_connection(host, port, ssl=ssl.create_default_context(cafile=ca))
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    for i in range(size // 1000):
        writer.write(f"X-Filler-{i}: {'a' * 990}\r\n".encode())
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(200), 2)
    except TimeoutError:
        return b""
    finally:
        writer.close()


async def test_certificate_and_limits_reload_for_new_connections(launch, tmp_path):  # noqa: F811
    pki = _pki(tmp_path)

    def text(cert: str, limits: str, port: int = 0) -> str:
        c, k = pki[cert]
        return (
            f"listen: {{host: 127.0.0.1, port: {port}, tls: {{cert: '{c}', key: '{k}'}}}}\n"
            f"limits: {limits}\n"
            f"backends:\n  fast: {SIM_FAST}\n"
            "routes:\n  - {name: chat, dialect: openai, backend: fast}\n"
        )

    conf = tmp_path / "gw.yaml"
    write(conf, text("one", "{}"))
    gw, url = await launch("serve", "--config", str(conf))
    host, port = url.split("//")[1].split(":")
    assert await _served_name(host, int(port), pki["ca"][0]) == "one"
    ctx = ssl.create_default_context(cafile=pki["ca"][0])
    base = f"https://{host}:{port}"
    ca = pki["ca"][0]
    assert await _dribbled_headers(host, int(port), ca, 4000) == b""  # still waiting for the rest
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, force_close=True)) as s:
        async with s.post(base + "/v1/chat/completions", json=chat(False, user="u" * 2000)) as r:
            assert r.status == 200

        edited = write(conf, text("two", "{max_header_bytes: 2048, max_body_bytes: 1024}", port=9))
        gw.send(signal.SIGHUP)
        await gw.line(f"configuration {edited} is live")
        assert "changing them takes a restart" in gw.log  # the port in the file changed; not the listener
        assert await _served_name(host, int(port), pki["ca"][0]) == "two"
        assert (await _dribbled_headers(host, int(port), ca, 4000)).startswith(b"HTTP/1.1 431 ")
        async with s.post(base + "/v1/chat/completions", json=chat(False, user="u" * 2000)) as r:
            assert r.status == 413
        async with s.post(base + "/v1/chat/completions", json=chat(False)) as r:
            assert r.status == 200

        # A certificate that does not load is a rejected configuration; the live one stays.
        write(conf, text("one", "{}").replace(pki["one"][1], str(tmp_path / "missing.key")))
        gw.send(signal.SIGHUP)
        await gw.line("was rejected")
        assert "config error: listen.tls: cannot load the certificate or key" in gw.log
        assert await _served_name(host, int(port), pki["ca"][0]) == "two"


async def test_sighup_on_the_embedded_default_has_nothing_to_reload(launch):  # noqa: F811
    gw, url = await launch("serve", "--host", "127.0.0.1", "--port", "0")
    gw.send(signal.SIGHUP)
    await gw.line("the embedded default configuration is in use: there is no file to reload")
    async with aiohttp.ClientSession() as s, s.get(url + "/healthz") as r:
        assert r.status == 200


NAME = web.AppKey("name", str)


def _app(name: str, gate: asyncio.Event, stopped: list[str]) -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        if request.match_info["what"] == "slow":
            await gate.wait()
        return web.json_response({"app": request.app[NAME], "what": request.match_info["what"]})

    async def cleanup(app: web.Application) -> None:
        stopped.append(app[NAME])

    app = web.Application()
    app[NAME] = name
    app.router.add_get("/{what}", handler)
    app.on_cleanup.append(cleanup)
    return app


async def test_a_replaced_app_finishes_its_requests_then_stops():
    """The Switch: new requests go to the new app (its router, match_info and request.app), the
    one replaced keeps its request in flight and is stopped once that is done."""
    gate, stopped = asyncio.Event(), []
    first = _app("first", gate, stopped)
    await start_app(first)
    switch = Switch(first)
    listener = Listener(switch, Guard(10, 65536))
    port = await listener.start("127.0.0.1", 0)
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as s:

        async def get(path: str) -> Any:
            async with s.get(base + path) as r:
                assert r.status == 200
                return await r.json()

        slow = asyncio.create_task(get("/slow"))
        while not switch.in_flight():
            await asyncio.sleep(0.01)
        second = _app("second", gate, stopped)
        await start_app(second)
        switch.swap(second)
        assert await get("/fast") == {"app": "second", "what": "fast"}
        assert switch.apps() == [first, second] and stopped == []
        gate.set()
        assert await slow == {"app": "first", "what": "slow"}
        for _ in range(100):
            if stopped:
                break
            await asyncio.sleep(0.01)
        assert stopped == ["first"] and switch.apps() == [second]
    await drain(listener, 0, 1, asyncio.Event())
    assert stopped == ["first", "second"]
