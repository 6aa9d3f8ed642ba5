"""Hostile clients and misbehaving backends against a running gateway, as an attacker would try them.

Starts `gateway serve` (one process, as users run it) in front of simulated backends and a few
deliberately bad ones, runs each attack while a probe measures /healthz latency, and prints one
line per attack: what the attacker got, and how the gateway's other clients fared meanwhile.

    .venv/bin/python benchmarks/attacks.py

Needs only the project's own dependencies. Takes about a minute (the slow-client attacks wait
for the gateway's deadlines, set shorter here than the defaults: header 3 s, body 5 s).
"""

import asyncio
import collections
import gzip
import logging
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.tokenizer_kit import build_tokenizer_folder  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# A chat answer of 1 GiB of text, gzip-compressed to about 1 MiB.
ANSWER_BOMB = gzip.compress(b'{"choices":[{"message":{"content":"' + b"a" * (1 << 30) + b'"}}]}', 9)


class EvilBackend:
    """One aiohttp server, several bad behaviours told apart by the path prefix."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.elsewhere_hits = 0
        self.endless_bytes = 0  # what the endless answers wrote before the gateway cut them
        self.cut = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.seen.append((request.path, dict(request.headers)))
        kind = request.path.split("/")[1]
        if kind == "elsewhere":
            self.elsewhere_hits += 1
            return web.json_response({"ok": True})
        if kind == "redirect":
            return web.Response(status=307, headers={"Location": f"http://127.0.0.1:{request.url.port}/elsewhere/x"})
        if kind == "echo":
            secret = request.headers.get("X-Backend-Secret", "")
            return web.json_response(
                {"error": {"message": f"rejected; you sent X-Backend-Secret: {secret}"}}, status=400
            )
        if kind == "reset":
            assert request.transport is not None
            request.transport.close()
            raise ConnectionResetError
        if kind in ("endless", "endless-event"):
            # An answer (or one stream event) that never ends, until the reader goes away.
            stream = kind == "endless-event"
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream" if stream else "application/json"})
            await resp.prepare(request)
            await resp.write(
                b'data: {"choices":[{"delta":{"content":"' if stream else b'{"choices":[{"message":{"content":"'
            )
            try:
                while True:
                    await resp.write(b"a" * 65536)
                    self.endless_bytes += 65536
            except (ConnectionError, asyncio.CancelledError):  # a lost connection's drain says ConnectionError
                self.cut += 1
                raise
        if kind == "bomb":
            return web.Response(
                body=ANSWER_BOMB, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
            )
        resp = web.json_response(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )
        resp.set_cookie("sticky", "from-an-earlier-client")
        return resp

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app


EVIL = ("redirect", "echo", "reset", "cookie", "endless", "endless-event", "bomb")


def config(evil: str, tok: str, sims: dict[str, str]) -> str:
    bad = "".join(
        f"  {k}: {{dialect: openai, url: '{evil}/{k}', headers: {{X-Backend-Secret: s3cr3t-value-{k}}}}}\n"
        for k in EVIL
    )
    routes = "".join(f"  - {{name: {k}, dialect: openai, backend: {k}, prefix: /{k}}}\n" for k in EVIL)
    return (
        "limits: {client_header_timeout_s: 3, client_body_timeout_s: 5, max_concurrent_requests: 64,"
        " max_answer_bytes: 16777216}\n"
        "shutdown: {drain_delay_s: 0}\n"
        "backends:\n"
        f"  tgi: {{dialect: tgi, url: '{sims['tgi']}', tokenizer: '{tok}'}}\n"
        f"  oai: {{dialect: openai, url: '{sims['openai']}'}}\n"
        f"  tri: {{dialect: triton, url: '{sims['triton']}', options: {{flavor: vllm}}}}\n"
        f"{bad}"
        "routes:\n"
        "  - {name: chat, dialect: openai, backend: oai}\n"
        "  - {name: dbx-tgi, dialect: databricks, backend: tgi}\n"
        "  - {name: tgi-chat, dialect: openai, backend: tgi, prefix: /tgi}\n"
        "  - {name: tri, dialect: openai, backend: tri, prefix: /tri}\n"
        f"{routes}"
    )


# The probe is a process of its own, so the attacker's work does not colour what it measures:
# GET /healthz every 20 ms on one kept-alive connection until its stdin closes, then print the
# latencies in milliseconds.
PROBE = """
import http.client, select, sys, time
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
out = []
while not select.select([sys.stdin], [], [], 0.02)[0]:
    t0 = time.perf_counter()
    conn.request("GET", "/healthz")
    conn.getresponse().read()
    out.append((time.perf_counter() - t0) * 1000)
print(" ".join(f"{x:.2f}" for x in out))
"""


async def under_probe(port: int, attack: Callable[[], Awaitable[str]]) -> tuple[str, str]:
    probe = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PROBE, str(port), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    await asyncio.sleep(0.1)
    try:
        outcome = await attack()
    finally:
        out, _ = await probe.communicate(b"stop\n")
    s = [float(x) for x in out.split()] or [0.0]
    return outcome, f"/healthz p50 {statistics.median(s):.1f} ms, max {max(s):.1f} ms over {len(s)} probes"


async def post(url: str, path: str, **kw: Any) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.post(url + path, **kw) as r:
        return r.status, (await r.text())[:160]


async def said(url: str, path: str, **kw: Any) -> str:
    status, text = await post(url, path, **kw)
    return f"{status} {text}"


async def raw_conns(port: int, n: int, head: bytes) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    conns = []
    for _ in range(n):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(head)
        conns.append((r, w))
    return conns


async def closed_within(conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]], seconds: float) -> str:
    """How many of `conns` the gateway closed within `seconds`, by the status it answered."""

    async def one(r: asyncio.StreamReader) -> str | None:
        try:
            got = await asyncio.wait_for(r.read(), seconds)
        except (TimeoutError, ConnectionError):
            return None
        return got[9:12].decode() if got.startswith(b"HTTP/1.1 ") else "no answer"

    done = await asyncio.gather(*(one(r) for r, _ in conns))
    for _, w in conns:
        w.close()
    counts = collections.Counter(d for d in done if d is not None)
    by_status = ", ".join(f"{n} with {status}" for status, n in sorted(counts.items()))
    return f"{sum(counts.values())} of {len(conns)} closed within {seconds:g} s ({by_status or 'none'})"


async def main() -> int:
    # The reset backend's own server would log each reset it causes; that is not the gateway's log.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    evil = EvilBackend()
    runner = web.AppRunner(evil.app(), access_log=None)
    await runner.setup()
    evil_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", evil_port).start()
    tmp = Path(tempfile.mkdtemp())
    build_tokenizer_folder(tmp / "tok")
    # The simulated backends run as processes of their own, as real servers would: what is
    # measured is the gateway's own behaviour.
    sims: dict[str, str] = {}
    procs: list[subprocess.Popen[str]] = []
    for dialect, extra in (("tgi", []), ("openai", []), ("triton", ["--option", "flavor=vllm"])):
        p = free_port()
        cmd = [sys.executable, "-m", "gateway", "simulate", "--dialect", dialect, "--port", str(p), *extra]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL))
        sims[dialect] = f"http://127.0.0.1:{p}"
    (tmp / "gw.yaml").write_text(config(f"http://127.0.0.1:{evil_port}", str(tmp / "tok"), sims))
    bomb = gzip.compress(b" " * (512 * 1024 * 1024), 9)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(tmp / "gw.yaml"), "--port", str(port)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    assert proc.stderr is not None
    for line in proc.stderr:
        if "listening on" in line:
            break
    # The gateway's log is read all along: a full pipe would stall it and spoil every figure.
    log_lines: list[str] = []
    reader = threading.Thread(target=lambda: log_lines.extend(proc.stderr or ()), daemon=True)
    reader.start()

    async def attack(name: str, fn: Callable[[], Awaitable[str]]) -> None:
        outcome, probe = await under_probe(port, fn)
        print(f"{name}\n    -> {outcome}\n    -> {probe}; gateway RSS {rss_mb(proc.pid):.0f} MB", flush=True)

    print(f"gateway RSS at start: {rss_mb(proc.pid):.0f} MB")
    chat = {"messages": [{"role": "user", "content": "hi"}]}

    async def n_huge() -> str:
        return await said(url, "/serving-endpoints/x/invocations", data=b'{"prompt":"hi","n":10000000000000000}')

    async def prompts_x_n() -> str:
        body = {"model": "m", "prompt": [f"p{i}" for i in range(1000)], "n": 4, "max_tokens": 1}
        status, text = await post(url, "/tgi/v1/completions", json=body)
        return f"{status} {text[:110]}"

    async def big_prompt() -> str:
        body = {"model": "m", "messages": [{"role": "user", "content": "hello world " * 300_000}], "max_tokens": 4}
        t0 = time.perf_counter()
        status, _ = await post(url, "/tgi/v1/chat/completions", json=body)
        return (
            f"{status} after {time.perf_counter() - t0:.1f} s (3.6 MB prompt through the chat template and tokenizer)"
        )

    async def nested() -> str:
        body = b'{"model":"m","messages":[{"role":"user","content":"x"}],"x":' + b"[" * 600 + b"]" * 600 + b"}"
        return await said(url, "/v1/chat/completions", data=body)

    async def bad_gzip() -> str:
        h = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        return await said(url, "/v1/chat/completions", data=b"\x1f\x8b\x08\x00garbage", headers=h)

    async def gzip_bomb() -> str:
        h = {"Content-Encoding": "gzip"}
        status, text = await post(url, "/v1/chat/completions", data=bomb, headers=h)
        return f"{status} {text[:90]} (a {len(bomb) // 1024} KB gzip of 512 MB)"

    async def slowloris() -> str:
        conns = await raw_conns(port, 1000, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-a: ")
        closed = await closed_within(conns, 6)
        return f"half-sent header sets: {closed}; deadline 3 s"

    async def slow_bodies() -> str:
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"
        conns = await raw_conns(port, 100, head)
        closed = await closed_within(conns, 9)
        return f"one-byte bodies from one client: {closed}; deadline 5 s, 32 at once per client"

    async def unfinished_big_bodies() -> str:
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3900000\r\n\r\n" + b"x" * 65536
        before = rss_mb(proc.pid)
        conns = await raw_conns(port, 100, head)
        await asyncio.sleep(1)
        during = rss_mb(proc.pid)
        status, _ = await post(url, "/v1/chat/completions", json={**chat, "model": "m"})
        closed = await closed_within(conns, 9)
        return (
            f"RSS {before:.0f} MB before, {during:.0f} MB with 100 unfinished 3.9 MB bodies; "
            f"a normal request meanwhile: {status}; the bodies: {closed}"
        )

    async def big_headers() -> str:
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(
            b"X-F%d: %s\r\n" % (i, b"a" * 8000) for i in range(40)
        )
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(head + b"\r\n")
        got = await asyncio.wait_for(r.read(), 5)
        w.close()
        return got.split(b"\r\n")[0].decode()

    async def redirect() -> str:
        status, text = await post(url, "/redirect/v1/chat/completions", json={**chat, "model": "m"})
        return f"{status} {text[:100]}; requests that reached the redirect target: {evil.elsewhere_hits}"

    async def cookie() -> str:
        for _ in range(3):
            await post(url, "/cookie/v1/chat/completions", json={**chat, "model": "m"})
        carried = sum(1 for p, h in evil.seen if p.startswith("/cookie") and "Cookie" in h)
        return f"requests to the cookie-setting backend that carried a cookie back: {carried} of 3"

    async def echo() -> str:
        status, text = await post(url, "/echo/v1/chat/completions", json={**chat, "model": "m"})
        return f"{status} {text[:120]} (secret shown: {'s3cr3t' in text})"

    async def reset() -> str:
        before = sum(1 for p, _ in evil.seen if p.startswith("/reset"))
        status, _ = await post(url, "/reset/v1/chat/completions", json={**chat, "model": "m"})
        after = sum(1 for p, _ in evil.seen if p.startswith("/reset"))
        return f"{status}; POSTs the backend received: {after - before}"

    async def endless() -> str:
        got = []
        for kind, body in (("endless", chat), ("endless-event", {**chat, "stream": True}), ("bomb", chat)):
            status, text = await post(url, f"/{kind}/v1/chat/completions", json={**body, "model": "m"})
            got.append(f"{kind}: {status} {'limits.max_answer_bytes' in text}")
        for _ in range(100):  # the backend sees its connection cut a moment after the gateway cuts it
            if evil.cut == 2:
                break
            await asyncio.sleep(0.02)
        mb = evil.endless_bytes / 2**20
        return f"{'; '.join(got)} (limit named); the endless ones cut {evil.cut} of 2, after {mb:.0f} MiB"

    async def path_walk() -> str:
        a = await post(url, "/tri/v1/completions", json={"model": "..", "prompt": "x"})
        b = await post(url, "/serving-endpoints/./invocations", json=chat)
        return f"Triton '..': {a[0]}; Databricks '.': {b[0]}"

    async def leavers() -> str:
        body = {**chat, "model": "m", "stream": True, "max_tokens": 50}
        async with aiohttp.ClientSession() as s:
            for _ in range(200):
                r = await s.post(url + "/v1/chat/completions", json=body)
                await r.content.readany()
                r.close()
        return "200 clients left mid-stream"

    for name, fn in [
        ("1. Databricks n=1e16 to a TGI backend", n_huge),
        ("2. 1,000 prompts x n=4 to a TGI backend", prompts_x_n),
        ("3. 3.6 MB prompt on a translating route", big_prompt),
        ("4a. JSON nested 600 deep on a pass-through route", nested),
        ("4b. corrupt gzip body", bad_gzip),
        ("4c. gzip bomb", gzip_bomb),
        ("5a. 1,000 slowloris connections", slowloris),
        ("5b. 100 bodies at one byte per forever", slow_bodies),
        ("5c. 100 unfinished 3.9 MB bodies", unfinished_big_bodies),
        ("5d. 40 x 8 KB headers", big_headers),
        ("6. backend answers 307 to another host", redirect),
        ("7. backend sets a cookie", cookie),
        ("8. backend echoes its credential in an error", echo),
        ("9. backend resets after reading the request", reset),
        ("9b. backend answers without end, or with a 1 GiB gzip bomb (limit 16 MiB)", endless),
        ("10. model names that walk the backend's URL", path_walk),
        ("11. clients leaving mid-stream", leavers),
    ]:
        await attack(name, fn)

    async with aiohttp.ClientSession() as s, s.get(url + "/readyz") as r:
        ready = await r.text()
    print(f"12. /readyz shows backend addresses: {f'127.0.0.1:{evil_port}' in ready}")
    # SIGTERM, as an orchestrator stops it (SIGHUP would reload the config): a drain, then exit.
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(30)
    reader.join(5)
    log = "".join(log_lines)
    errors = [ln for ln in log.splitlines() if re.search(r" (ERROR|CRITICAL) ", ln)]
    tracebacks = log.count("Traceback")
    print(f"13. SIGTERM: exit code {code}; ERROR lines in the gateway's log: {len(errors)}; tracebacks: {tracebacks}")
    for ln in errors[:5]:
        print("    " + ln)
    await runner.cleanup()
    for p in procs:
        p.terminate()
        p.wait()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(asyncio.run(main()))
