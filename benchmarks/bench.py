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


# Each request kind: (path, body builder, is_stream)
Kind = tuple[str, Callable[[bool], dict[str, Any]], bool]


def chat_body(stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "bench", "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 16}
    if stream:
        body["stream"] = True
    return body


async def drive(url: str, body: dict[str, Any], concurrency: int, seconds: float) -> dict[str, float]:
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
                    if body.get("stream"):
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
        "rps": n / elapsed,
        "p50_ms": 1000 * statistics.median(latencies) if n else 0.0,
        "p99_ms": 1000 * latencies[min(n - 1, int(n * 0.99))] if n else 0.0,
        "chunks_s": chunks / elapsed,
        "errors": errors,
    }


def fmt(name: str, r: dict[str, float], base: dict[str, float] | None, key: str) -> str:
    ratio = f" ({r[key] / base[key]:.2f}x direct)" if base and base[key] else ""
    return f"  {name:<22} {key}={r[key]:,.1f}{ratio}"


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
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(
            f"listen: {{host: 127.0.0.1, port: {gw_port}}}\n"
            f"limits: {{max_concurrent_requests: 100000}}\n"
            f"backends:\n  up: {{dialect: openai, url: 'http://127.0.0.1:{up_port}', model: bench}}\n"
            f"routes:\n  - {{name: openai, dialect: openai, backend: up}}\n"
        )
        cfg = f.name
    gw = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--log-level", "WARNING", "serve", "--config", cfg], env=env
    )
    try:
        await wait_ready(f"http://127.0.0.1:{up_port}/v1/models")
        await wait_ready(f"http://127.0.0.1:{gw_port}/healthz")
        direct = f"http://127.0.0.1:{up_port}/v1/chat/completions"
        via = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
        # Warm up both paths (connection pools, import caches).
        await drive(direct, chat_body(False), 4, 0.5)
        await drive(via, chat_body(False), 4, 0.5)

        print(f"latency at low load (concurrency 1, {args.seconds:g}s):")
        d = await drive(direct, chat_body(False), 1, args.seconds)
        g = await drive(via, chat_body(False), 1, args.seconds)
        print(f"  direct                 p50={d['p50_ms']:.3f}ms p99={d['p99_ms']:.3f}ms")
        print(
            f"  gateway (openai)       p50={g['p50_ms']:.3f}ms p99={g['p99_ms']:.3f}ms "
            f"(+{g['p50_ms'] - d['p50_ms']:.3f}ms p50, {g['p50_ms'] / d['p50_ms']:.2f}x)"
        )

        print(f"throughput at saturation (concurrency {args.concurrency}):")
        d = await drive(direct, chat_body(False), args.concurrency, args.seconds)
        g = await drive(via, chat_body(False), args.concurrency, args.seconds)
        print(fmt("direct", d, None, "rps"))
        print(fmt("gateway (openai)", g, d, "rps"))

        print(f"streaming ({args.chunks} chunks per answer, concurrency {args.concurrency}):")
        d = await drive(direct, chat_body(True), args.concurrency, args.seconds)
        g = await drive(via, chat_body(True), args.concurrency, args.seconds)
        print(fmt("direct", d, None, "chunks_s"))
        print(fmt("gateway (openai)", g, d, "chunks_s"))
        print(f"gateway RSS after the run: {rss_mb(gw.pid):.1f} MiB")
        if d["errors"] or g["errors"]:
            print(f"errors: direct={d['errors']} gateway={g['errors']}")
    finally:
        for p in (gw, up):
            p.terminate()
            p.wait(10)
        os.unlink(cfg)


if __name__ == "__main__":
    asyncio.run(main())
