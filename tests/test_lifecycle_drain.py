"""Stopping cleanly: SIGTERM drains (/readyz 503 at once, connections still taken for the drain
delay, requests in flight finish within the grace period, streams still open then end their
dialect's way), SIGINT skips the delay, a second signal stops at once; with `--workers 2` the
parent relays and waits as long as the workers need. Real `gateway` processes, real signals,
slow streams from `gateway simulate --token-delay-ms`. Also: the Kubernetes manifests agree with
these timings."""

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gateway.config import parse_config
from gateway.workers import stop_budget

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "k8s"
LISTENING = re.compile(r"listening on (https?://[\d.]+:(\d+))")
# A stream from the simulator is 17 tokens long for this prompt (one token per delay).
PROMPT = "drain me gently please right now"
TOKENS = 17


class Running:
    """A `gateway` subprocess; its stderr is collected as it comes (the pipe must never fill)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._more = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.lines.append(line.decode(errors="replace"))
            self._more.set()
        self._more.set()

    @property
    def log(self) -> str:
        return "".join(self.lines)

    async def line(self, pattern: str, timeout: float = 30, after: int = 0) -> re.Match[str]:
        """The first line (from index `after`) matching `pattern`, waiting for it to come."""
        deadline = time.monotonic() + timeout
        seen = after
        while True:
            for line in self.lines[seen:]:
                m = re.search(pattern, line)
                if m:
                    return m
            seen = max(seen, len(self.lines))
            if self._reader.done():
                raise AssertionError(f"exited without logging {pattern!r}:\n{self.log}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line {pattern!r} within {timeout}s:\n{self.log}")
            self._more.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._more.wait(), left)

    async def lines_with(self, text: str, n: int, timeout: float = 30) -> None:
        """Wait until `n` lines contain `text`."""
        deadline = time.monotonic() + timeout
        while sum(text in line for line in self.lines) < n:
            if self._reader.done() or time.monotonic() > deadline:
                raise AssertionError(f"not {n} lines with {text!r}:\n{self.log}")
            self._more.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._more.wait(), 0.5)

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    async def exited(self, timeout: float) -> int:
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        await self._reader
        return code

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        await self._reader


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "GATEWAY_CONFIG")}


@pytest.fixture
async def launch() -> AsyncIterator[Any]:
    """`await launch(*args)` -> (Running, base URL) for `gateway ARGS` once it listens."""
    started: list[Running] = []

    async def go(*args: str) -> tuple[Running, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", *args,
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=clean_env(),
        )  # fmt: skip
        run = Running(proc)
        started.append(run)
        m = await run.line(LISTENING.pattern, timeout=60)
        return run, m.group(1)

    yield go
    for run in started:
        await run.close()


async def simulator(launch: Any, delay_ms: float) -> str:
    _, url = await launch("simulate", "--dialect", "openai", "--port", "0", "--token-delay-ms", str(delay_ms))
    return str(url)


def write_config(path: Path, backend_url: str, drain_delay_s: float, grace_s: float, extra: str = "") -> Path:
    path.write_text(
        f"listen: {{host: 127.0.0.1, port: 0}}\n"
        f"shutdown: {{drain_delay_s: {drain_delay_s}, grace_s: {grace_s}}}\n"
        f"backends:\n  up: {{dialect: openai, url: '{backend_url}'}}\n"
        f"routes:\n  - {{name: chat, dialect: openai, backend: up}}\n" + extra
    )
    return path


def chat(stream: bool, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "stream": stream, **extra}


class OpenStream:
    """A streamed chat answer whose first event has arrived."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session, self.url = session, url
        self.resp: aiohttp.ClientResponse | None = None
        self.first = b""

    async def open(self) -> "OpenStream":
        self.resp = await self.session.post(self.url + "/v1/chat/completions", json=chat(True))
        assert self.resp.status == 200, await self.resp.text()
        self.first = await self.resp.content.readuntil(b"\n\n")
        return self

    async def rest(self) -> bytes:
        assert self.resp is not None
        try:
            return self.first + await self.resp.content.read()
        finally:
            self.resp.release()


def events(body: bytes) -> list[bytes]:
    return [e for e in body.split(b"\n\n") if e]


def complete(body: bytes) -> bool:
    evs = events(body)
    return evs[-1] == b"data: [DONE]" and not any(b'"error"' in e for e in evs) and b'"finish_reason":"stop"' in body


async def refused(url: str, within: float) -> float:
    """Seconds until a new connection to `url` is refused (AssertionError if not within `within`)."""
    host, port = url.removeprefix("http://").split(":")
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        try:
            _, writer = await asyncio.open_connection(host, int(port))
        except OSError:
            return time.monotonic() - t0
        writer.close()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} still takes connections after {within}s")


async def drain_with_streams(launch: Any, tmp_path: Path, *workers: str, delay_ms: float, n: int) -> None:
    """SIGTERM while `n` streams are open: /readyz is 503 at once and /healthz 200, new requests
    are served through the drain delay, then connections are refused, every stream completes and
    the process exits 0."""
    drain_delay = 2.0
    sim = await simulator(launch, delay_ms)
    conf = write_config(tmp_path / "gw.yaml", sim, drain_delay_s=drain_delay, grace_s=20)
    gw, url = await launch("serve", "--config", str(conf), *workers)
    # A connection per request, so that with workers the kernel spreads them.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        streams = await asyncio.gather(*(OpenStream(s, url).open() for _ in range(n)))
        signalled = time.monotonic()
        gw.send(signal.SIGTERM)
        await gw.line("SIGTERM: draining")
        async with s.get(url + "/readyz") as r:
            assert r.status == 503
            assert await r.json() == {"status": "draining"}
        async with s.get(url + "/healthz") as r:
            assert r.status == 200
        # Still taking new requests, and telling the client to go elsewhere next time.
        assert time.monotonic() - signalled < drain_delay
        async with s.post(url + "/v1/chat/completions", json=chat(False, max_tokens=1)) as r:
            assert r.status == 200, await r.text()
            assert r.headers.get("Connection", "").lower() == "close"
            assert (await r.json())["choices"][0]["finish_reason"] == "length"
        await refused(url, within=drain_delay + 3)
        assert time.monotonic() - signalled >= drain_delay * 0.9
        bodies = await asyncio.gather(*(st.rest() for st in streams))
    assert all(complete(b) for b in bodies), bodies
    assert all(len(events(b)) >= TOKENS for b in bodies)
    assert await gw.exited(30) == 0
    assert "Traceback" not in gw.log
    assert "ending" not in gw.log  # no stream needed ending: all finished within the grace period


async def test_sigterm_drains_a_single_process(launch, tmp_path):
    await drain_with_streams(launch, tmp_path, delay_ms=150, n=6)


async def test_sigterm_drains_two_workers_past_the_old_ten_seconds(launch, tmp_path):
    """The parent relays SIGTERM and waits as long as the workers drain: streams that need
    about 11 s after the signal (the parent used to kill its workers after 10 s) complete."""
    await drain_with_streams(launch, tmp_path, "--workers", "2", delay_ms=700, n=6)


async def grace_over(launch: Any, tmp_path: Path, *workers: str) -> None:
    sim = await simulator(launch, 1000)  # a 17 s stream
    conf = write_config(tmp_path / "gw.yaml", sim, drain_delay_s=0, grace_s=1)
    gw, url = await launch("serve", "--config", str(conf), *workers)
    async with aiohttp.ClientSession() as s:
        stream = await OpenStream(s, url).open()
        gw.send(signal.SIGTERM)
        t0 = time.monotonic()
        body = await asyncio.wait_for(stream.rest(), 10)
        took = time.monotonic() - t0
    evs = events(body)
    assert evs[-1] == b"data: [DONE]"
    assert evs[-2].startswith(b'data: {"error":'), evs[-2:]
    assert b"shutting down" in evs[-2]
    assert 0.8 < took < 4, took
    assert await gw.exited(15) == 0
    assert "Traceback" not in gw.log
    await gw.line(r"ending 1 stream\(s\) still open")


async def test_after_the_grace_period_a_stream_ends_in_band(launch, tmp_path):
    await grace_over(launch, tmp_path)


async def test_after_the_grace_period_a_workers_stream_ends_in_band(launch, tmp_path):
    await grace_over(launch, tmp_path, "--workers", "2")


async def test_a_second_signal_stops_at_once(launch, tmp_path):
    sim = await simulator(launch, 1000)
    conf = write_config(tmp_path / "gw.yaml", sim, drain_delay_s=5, grace_s=30)
    gw, url = await launch("serve", "--config", str(conf))
    async with aiohttp.ClientSession() as s:
        stream = await OpenStream(s, url).open()
        gw.send(signal.SIGTERM)
        await gw.line("SIGTERM: draining")
        t0 = time.monotonic()
        gw.send(signal.SIGTERM)
        body = await asyncio.wait_for(stream.rest(), 10)
    assert await gw.exited(10) == 0
    assert time.monotonic() - t0 < 4
    assert events(body)[-1] == b"data: [DONE]" and b"shutting down" in events(body)[-2]
    assert "SIGTERM again: stopping now" in gw.log


async def test_sigint_skips_the_drain_delay_and_closes_idle_connections(launch, tmp_path):
    """Ctrl-C: no drain delay (the listener closes at once); a kept-alive idle connection is
    answered once more, saying `Connection: close`, and then closed (never closed unannounced,
    which could lose a request its client sends that moment); the request in flight completes."""
    sim = await simulator(launch, 100)
    conf = write_config(tmp_path / "gw.yaml", sim, drain_delay_s=30, grace_s=20)
    gw, url = await launch("serve", "--config", str(conf))
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"close" not in head.lower()
    await reader.readexactly(int(re.search(rb"Content-Length: (\d+)", head).group(1)))  # type: ignore[union-attr]
    async with aiohttp.ClientSession() as s:
        stream = await OpenStream(s, url).open()
        gw.send(signal.SIGINT)
        assert await refused(url, within=2) < 1.5
        # The kept-alive connection's next request is answered, and told this is the last.
        writer.write(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 3)
        assert head.startswith(b"HTTP/1.1 200") and b"connection: close" in head.lower()
        await reader.readexactly(int(re.search(rb"Content-Length: (\d+)", head).group(1)))  # type: ignore[union-attr]
        assert await asyncio.wait_for(reader.read(), 3) == b""
        writer.close()
        body = await stream.rest()
    assert complete(body)
    assert await gw.exited(15) == 0
    assert "SIGINT: stopping" in gw.log


def test_stop_budget_covers_the_drain():
    conf = parse_config({"shutdown": {"drain_delay_s": 5, "grace_s": 30}, "backends": {}, "routes": []})
    assert stop_budget(conf.shutdown, signal.SIGTERM) == 40
    assert stop_budget(conf.shutdown, signal.SIGINT) == 35


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def _pod_and_config(name: str) -> tuple[dict[str, Any], Any]:
    docs = _docs(name)
    [dep] = [d for d in docs if d["kind"] == "Deployment"]
    [cm] = [d for d in docs if d["kind"] == "ConfigMap"]
    data = yaml.safe_load(cm["data"]["config.yaml"])
    # The shape (and the shutdown timings) only: secrets and dialect options are test_deploy's.
    from gateway.config import Config, expand_env

    return dep["spec"]["template"]["spec"], Config.model_validate(expand_env(data, "", []))


def _prestop_sleep(container: dict[str, Any]) -> float:
    """Seconds a container's preStop hook sleeps (0 without one)."""
    hook = container.get("lifecycle", {}).get("preStop")
    if not hook:
        return 0.0
    if "sleep" in hook:
        return float(hook["sleep"]["seconds"])
    m = re.fullmatch(r"sleep (\d+(?:\.\d+)?)", " ".join(hook["exec"]["command"][-1:]))
    assert m, hook
    return float(m.group(1))


@pytest.mark.parametrize("manifest", ["gateway.yaml", "sidecar-mindie.yaml", "pool-member-mindie.yaml"])
def test_kubernetes_grace_period_agrees_with_the_drain(manifest):
    """The pod's terminationGracePeriodSeconds covers the gateway's drain delay, grace period and
    the parent's margin, after any preStop sleep; the gateway itself needs no preStop sleep (its
    drain delay keeps it serving while the endpoint is removed). Beside MindIE, the MindIE
    container's preStop keeps it generating for as long as the gateway may still be draining."""
    pod, config = _pod_and_config(manifest)
    containers = {c["name"]: c for c in pod["containers"]}
    gateway = containers["gateway"]
    assert _prestop_sleep(gateway) == 0
    budget = stop_budget(config.shutdown, signal.SIGTERM)
    assert pod["terminationGracePeriodSeconds"] >= budget
    if manifest == "gateway.yaml":
        # The defaults, written out: drain 5 s, grace 30 s, and not much more than the budget.
        assert (config.shutdown.drain_delay_s, config.shutdown.grace_s) == (5, 30)
        assert pod["terminationGracePeriodSeconds"] <= budget + 10
    for name, c in containers.items():
        if name != "gateway":
            sleep = _prestop_sleep(c)
            assert sleep >= config.shutdown.drain_delay_s + config.shutdown.grace_s, name
            assert pod["terminationGracePeriodSeconds"] >= sleep + 30, name  # room for its own stop


async def test_while_draining_a_stream_announces_its_connection_closes(make_gateway, upstream):
    """A stream's headers go out before it ends: during a drain they must already say
    `Connection: close`, or its client would send its next request on a connection about to go."""
    from gateway.proxy.services import SERVICES
    from tests.conftest import one_route
    from tests.support import sse_reply

    upstream.reply = sse_reply(
        [
            b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
            b'[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n',
            b"data: [DONE]\n\n",
        ]
    )
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    resp = await gw.post("/v1/chat/completions", json=body)
    assert resp.headers.get("Connection", "").lower() != "close"
    await resp.read()
    gw.server.app[SERVICES].drain.closing = True
    resp = await gw.post("/v1/chat/completions", json=body)
    assert resp.headers["Connection"].lower() == "close"
    assert (await resp.read()).endswith(b"data: [DONE]\n\n")
