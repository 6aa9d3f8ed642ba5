"""Gateway overhead against a direct connection, measured in the same run.

Starts a fast fake upstream and a single-process gateway in front of it, then drives both
with the same load: latency p50/p99 at low concurrency, requests/s at saturation, streamed
chunks/s, and the gateway's resident memory. Figures are printed as ratios to direct.

    .venv/bin/python benchmarks/bench.py [--seconds 5] [--concurrency 64] [--chunks 100]

Every route in ROUTES is measured through the gateway; "openai" is the same-dialect byte
pass-through, the others translate (their inbound dialect differs from the upstream's).
"""

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def wait_ready(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(200):
            try:
                async with s.get(url) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise SystemExit(f"{url} did not come up")


def chat_body(stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "bench", "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 16}
    if stream:
        body["stream"] = True
    return body


def completion_body(stream: bool) -> dict[str, Any]:
    return {"model": "bench", "prompt": "Say hello", "max_tokens": 16, **({"stream": True} if stream else {})}


# name -> (inbound dialect, prefix, whole path, stream path, body builder, upstream kind)
Body = Callable[[bool], dict[str, Any]]
ROUTES: dict[str, tuple[str, str, str, str, Body, str]] = {
    "openai chat (same dialect)": ("openai", "", "/v1/chat/completions", "/v1/chat/completions", chat_body, "chat"),
    "databricks chat": (
        "databricks",
        "",
        "/serving-endpoints/bench/invocations",
        "/serving-endpoints/bench/invocations",
        lambda s: {k: v for k, v in chat_body(s).items() if k != "model"},
        "chat",
    ),
    "mindie /infer": (
        "mindie",
        "/mindie",
        "/mindie/infer",
        "/mindie/infer",
        lambda s: {"inputs": "Say hello", "stream": s, "parameters": {"max_new_tokens": 16}},
        "completion",
    ),
    "tgi /generate": (
        "tgi",
        "",
        "/generate",
        "/generate_stream",
        lambda s: {"inputs": "Say hello", "parameters": {"max_new_tokens": 16}},
        "completion",
    ),
    "triton generate": (
        "triton",
        "",
        "/v2/models/bench/generate",
        "/v2/models/bench/generate_stream",
        lambda s: {"text_input": "Say hello", "max_tokens": 16},
        "completion",
    ),
}
DIRECT = {"chat": ("/v1/chat/completions", chat_body), "completion": ("/v1/completions", completion_body)}


async def drive(
    url: str, body: dict[str, Any], concurrency: int, seconds: float, stream: bool = False
) -> dict[str, float]:
    """Closed-loop load: `concurrency` workers send back-to-back requests for `seconds`."""
    latencies: list[float] = []
    chunks = 0
    errors = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as s:

        async def worker() -> None:
            nonlocal chunks, errors
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                async with s.post(url, json=body) as r:
                    if r.status != 200:
                        errors += 1
                        await r.read()
                        continue
                    if stream:
                        async for line in r.content:
                            if line.startswith(b"data:"):
                                chunks += 1
                    else:
                        await r.read()
                latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    latencies.sort()
    n = len(latencies)
    return {
        "n": n,
        "chunks": chunks,
        "rps": n / elapsed,
        "p50_ms": 1000 * statistics.median(latencies) if n else 0.0,
        "p99_ms": 1000 * latencies[min(n - 1, int(n * 0.99))] if n else 0.0,
        "chunks_s": chunks / elapsed,
        "errors": errors,
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=100)
    args = ap.parse_args()

    up_port, gw_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    up = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks/upstream.py"), str(up_port), str(args.chunks)], env=env
    )
    routes = "".join(
        f"  - {{name: r{i}, dialect: {d}, backend: up{', prefix: ' + p if p else ''}}}\n"
        for i, (d, p, *_rest) in enumerate(ROUTES.values())
    )
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(
            f"listen: {{host: 127.0.0.1, port: {gw_port}}}\n"
            f"limits: {{max_concurrent_requests: 100000}}\n"
            f"logging: {{access_log: false}}\n"
            f"backends:\n  up: {{dialect: openai, url: 'http://127.0.0.1:{up_port}', model: bench}}\n"
            f"routes:\n{routes}"
        )
        cfg = f.name
    gw = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--log-level", "WARNING", "serve", "--config", cfg], env=env
    )
    direct = f"http://127.0.0.1:{up_port}"
    via = f"http://127.0.0.1:{gw_port}"
    try:
        await wait_ready(f"{direct}/v1/models")
        await wait_ready(f"{via}/healthz")
        s, c = args.seconds, args.concurrency
        base: dict[str, dict[str, dict[str, float]]] = {}
        for kind, (path, body) in DIRECT.items():
            await drive(direct + path, body(False), 4, 0.5)
            base[kind] = {
                "low": await drive(direct + path, body(False), 1, s),
                "sat": await drive(direct + path, body(False), c, s),
                "stream": await drive(direct + path, body(True), c, s, stream=True),
            }
        print(f"{args.seconds:g}s per figure; saturation at concurrency {c}; {args.chunks} chunks per stream")
        print("Ratios compare with the direct connection measured just before. The per-core columns divide work")
        print("done by the gateway's own CPU seconds (from /proc), so they do not depend on the load generator,")
        print("which shares this machine's cores.")
        print(
            f"{'route':<28} {'p50 ms (c=1)':>20} {'requests/s':>20} {'stream chunks/s':>22} "
            f"{'req/core-s':>11} {'chunks/core-s':>14}"
        )
        for kind, b in base.items():
            print(
                f"{'direct ' + kind:<28} {b['low']['p50_ms']:>20.3f} {b['sat']['rps']:>20,.0f} "
                f"{b['stream']['chunks_s']:>22,.0f}"
            )
        errors = 0
        for name, (_d, _p, path, spath, body, kind) in ROUTES.items():
            b = base[kind]
            await drive(via + path, body(False), 4, 0.5)
            low = await drive(via + path, body(False), 1, s)
            cpu0 = cpu_s(gw.pid)
            sat = await drive(via + path, body(False), c, s)
            cpu1 = cpu_s(gw.pid)
            st = await drive(via + spath, body(True), c, s, stream=True)
            cpu2 = cpu_s(gw.pid)
            errors += int(low["errors"] + sat["errors"] + st["errors"])
            print(
                f"{name:<28} {low['p50_ms']:>7.3f} ({low['p50_ms'] / b['low']['p50_ms']:>4.2f}x dir.) "
                f"{sat['rps']:>7,.0f} ({sat['rps'] / b['sat']['rps']:>4.2f}x dir.) "
                f"{st['chunks_s']:>9,.0f} ({st['chunks_s'] / b['stream']['chunks_s']:>4.2f}x dir.) "
                f"{sat['n'] / max(cpu1 - cpu0, 1e-9):>11,.0f} {st['chunks'] / max(cpu2 - cpu1, 1e-9):>14,.0f}"
            )
        print(f"gateway RSS after the run: {rss_mb(gw.pid):.1f} MiB; errors: {errors}")
    finally:
        for p in (gw, up):
            p.terminate()
            p.wait(10)
        os.unlink(cfg)


if __name__ == "__main__":
    asyncio.run(main())
