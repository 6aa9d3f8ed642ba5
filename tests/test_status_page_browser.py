"""The status page as a user sees it, in headless Chromium (Debian's `chromium`, installed with
apt-get when missing and this runs as root; skipped, saying why, otherwise), driven through its
DevTools protocol: a real `gateway serve` with an API key and simulated backends; the page asks
for the key, shows both routes' figures after traffic through them, and a replica as ejected
once its backend is stopped. Nothing it loads leaves the loopback (the browser cannot resolve
any other name). Screenshots are kept under the test's tmp_path; their paths are printed."""

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web

from gateway.simulator.server import create_sim_app
from tests.test_lifecycle_drain import launch  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "gateway" / "status" / "static"
KEY = "k-browser-9c1e"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # No network but the loopback: any other name fails to resolve.
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--window-size=1280,1400",
    "--remote-debugging-port=0",
]


def chromium() -> str:
    """Debian's chromium, installed when missing if this may (root); else the test is skipped."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium is not installed, and installing it needs root: apt-get install -y chromium")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-o", "DPkg::Lock::Timeout=600", "chromium"]
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:  # the package lists may be missing or old
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600)
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=1200)
    found = shutil.which("chromium")
    if not found:
        pytest.skip(f"apt-get install -y chromium did not install it: {done.stderr.strip()[-300:]}")
    return found


class DevTools:
    """One page of a headless Chromium, over its DevTools protocol: commands, and the events
    that came (every request the page made among them, once Network is enabled)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self._calls: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next = 0
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data:
                self._calls.pop(data["id"]).set_result(data)
            else:
                self.events.append(data)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        future = self._calls[self._next] = asyncio.get_running_loop().create_future()
        await self.ws.send_json({"id": self._next, "method": method, "params": params})
        answer = await asyncio.wait_for(future, 30)
        assert "error" not in answer, answer
        return dict(answer["result"])

    async def evaluate(self, expression: str) -> Any:
        got = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in got, got
        return got["result"].get("value")

    async def until(self, expression: str, what: str, deadline_s: float = 30) -> Any:
        """The expression's value once it is truthy (the page redraws every second; while it
        loads, what the expression reads may not be there yet)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        attempt = f"(() => {{ try {{ return {expression}; }} catch (e) {{ return null; }} }})()"
        while not (value := await self.evaluate(attempt)):
            assert loop.time() < end, f"the page never showed {what}"
            await asyncio.sleep(0.25)
        return value

    async def screenshot(self, path: Path) -> None:
        shot = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        print(f"status page screenshot: {path}")

    def requested(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]


@contextlib.asynccontextmanager
async def browser(profile: Path) -> AsyncIterator[DevTools]:
    proc = await asyncio.create_subprocess_exec(
        chromium(), *FLAGS, f"--user-data-dir={profile}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        port = None
        while port is None:
            line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
            assert line, "chromium exited before it listened for DevTools"
            if m := re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line):
                port = m.group(1)
        # Its stderr keeps being read, so that a full pipe never stops it.
        drain = asyncio.create_task(proc.stderr.read())
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/json/list") as r:
                pages = [t for t in await r.json() if t["type"] == "page"]
            async with s.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                tools = DevTools(ws)
                await tools.call("Network.enable")
                await tools.call("Page.enable")
                yield tools
        drain.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def serve(app: web.Application) -> tuple[str, Callable[[], Awaitable[None]]]:
    """The app on a loopback port, and how to stop it (once; again does nothing)."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"

    async def stop() -> None:
        if runner.server is not None:
            await runner.cleanup()

    return url, stop


ROWS = """Object.fromEntries([...document.querySelectorAll('#routes tbody tr')].map(tr => [tr.dataset.route,
  Object.fromEntries([...tr.querySelectorAll('[data-figure]')].map(td => [td.dataset.figure, td.textContent]))]))"""
CARDS = "[...document.querySelectorAll('#charts .card h3')].map(h => h.textContent)"
REPLICA = 'document.querySelector(\'[data-backend="{b}"] [data-replica="{i}"]\')?.dataset.state'


def test_the_page_loads_nothing_from_elsewhere():
    """The page's files name no address: every request it makes is for a path beside it."""
    for f in STATIC.iterdir():
        text = f.read_text()
        # The SVG namespace is a name, never fetched.
        assert not re.search(r"(https?:)?//[\w.-]+", text.replace("http://www.w3.org/2000/svg", "")), f.name
        assert "@import" not in text and "url(" not in text, f.name


async def test_a_user_sees_both_routes_and_an_ejected_replica(launch, tmp_path):  # noqa: F811
    chat, stop_chat = await serve(create_sim_app("openai", token_delay_s=0.003))
    tgi_a, stop_a = await serve(create_sim_app("tgi", token_delay_s=0.003))
    tgi_b, stop_b = await serve(create_sim_app("tgi", token_delay_s=0.003))
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "listen: {host: 127.0.0.1, port: 0}\n"
        "shutdown: {drain_delay_s: 0, grace_s: 1}\n"
        f"auth: {{api_keys: [{KEY}]}}\n"
        "backends:\n"
        f"  sim-chat: {{dialect: openai, url: '{chat}'}}\n"
        f"  sim-tgi: {{dialect: tgi, urls: ['{tgi_a}', '{tgi_b}'], retry_backoff_s: 0, eject_base_s: 300}}\n"
        "routes:\n"
        "  - {name: chat, dialect: openai, backend: sim-chat}\n"
        "  - {name: gen, dialect: tgi, backend: sim-tgi, prefix: /tgi}\n"
    )
    gateway, base = await launch("serve", "--config", str(config))
    digest = (await gateway.line(r"configuration (\w+) is live")).group(1)
    auth = {"Authorization": f"Bearer {KEY}"}

    async def traffic(tgi_only: bool = False) -> None:
        chat_body = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 6}
        tgi_body = {"inputs": "hello there", "parameters": {"max_new_tokens": 6}}
        calls = [] if tgi_only else [("/v1/chat/completions", {**chat_body, "stream": i < 3}) for i in range(5)]
        calls += [("/tgi/generate_stream", tgi_body)] * 4
        async with aiohttp.ClientSession(headers=auth) as s:
            for path, body in calls:
                async with s.post(base + path, json=body) as r:
                    await r.read()
                    assert r.status == 200, (path, r.status)

    try:
        async with browser(tmp_path / "profile") as page:
            await page.call("Page.navigate", url=base + "/ui/")
            # The page asks for the key once; the user types it in.
            await page.until("!document.getElementById('key-form').hidden", "the API key form")
            await page.screenshot(tmp_path / "status-page-key.png")
            await page.evaluate(
                f"document.getElementById('key').value = {json.dumps(KEY)};"
                "document.getElementById('key-form').requestSubmit(); true"
            )
            await page.until("!document.getElementById('content').hidden", "the figures")
            summary = await page.evaluate("document.getElementById('summary').textContent")
            assert digest in summary

            await traffic()
            # Both routes' figures: their requests over the window, rates, latencies of streams.
            await page.until(f"JSON.stringify({CARDS}) === JSON.stringify(['chat: 5 requests, 0 errors', "
                             "'gen: 4 requests, 0 errors'])", "both routes' requests")  # fmt: skip
            rows = await page.evaluate(ROWS)
            for route in ("chat", "gen"):
                figures = rows[route]
                assert float(figures["rps"]) > 0, figures
                assert figures["error_rate"] == "0.0%", figures
                assert re.fullmatch(r"[\d.]+ ms / [\d.]+ ms", figures["ttft"]), figures
                assert re.fullmatch(r"[\d.]+ ms / [\d.]+ ms", figures["itl"]), figures
            charts = await page.evaluate("document.querySelectorAll('#charts svg path.line').length")
            assert charts >= 2 * 7  # two routes, five charts, two lines in two of them
            assert await page.evaluate(REPLICA.format(b="sim-tgi", i=1)) == "up"
            await page.screenshot(tmp_path / "status-page-traffic.png")

            # One of gen's two replicas stops; the next requests find it gone and eject it.
            await stop_b()
            await traffic(tgi_only=True)
            await page.until(f"{REPLICA.format(b='sim-tgi', i=1)} === 'ejected'", "replica 1 ejected")
            text = await page.evaluate("document.querySelector('[data-backend=\"sim-tgi\"]').textContent")
            assert "#0 up" in text and "#1 ejected, tried again in" in text
            # Its requests failed over to the other replica: nothing went wrong for their clients.
            assert await page.evaluate("!document.getElementById('no-errors').hidden")
            await page.screenshot(tmp_path / "status-page-ejected.png")

            # The form: a chat with top_k and a stop string, explained for the TGI route's
            # backend as `gateway explain` would; no address of a replica on the page.
            ask = {"inputs": "hello there", "parameters": {"max_new_tokens": 6, "top_k": 5, "stop": ["END"]}}
            await page.evaluate(
                "document.getElementById('explain-route').value = 'gen';"
                f"document.getElementById('explain-path').value = '/tgi/generate';"
                f"document.getElementById('explain-body').value = {json.dumps(json.dumps(ask))};"
                "document.getElementById('explain-form').requestSubmit(); true"
            )
            await page.until("!document.getElementById('explain-out').hidden", "the explanation")
            explained = await page.evaluate("document.getElementById('explain-out').textContent")
            assert explained.startswith("route gen (tgi /tgi/generate) -> backend sim-tgi"), explained
            assert "top_k" in explained and '"stop":["END"]' in explained.replace(" ", ""), explained
            assert "(sim-tgi, replica 0)" in explained and urlsplit(tgi_a).netloc not in explained
            await page.screenshot(tmp_path / "status-page-explain.png")

            # Every request the page made went to the gateway on the loopback.
            requested = page.requested()
            assert any(u.endswith("/ui/api/state") for u in requested)
            assert any(u.endswith("/ui/api/explain") for u in requested)
            assert {urlsplit(u).hostname for u in requested} == {"127.0.0.1"}, requested
            # The key went in a header of the page's own requests, never in an address.
            assert not any(KEY in u for u in requested)
    finally:
        for stop in (stop_chat, stop_a, stop_b):
            await stop()
