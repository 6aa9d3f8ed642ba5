"""The `gateway` command as users run it: check-config, serve and simulate, in subprocesses."""

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

ROOT = Path(__file__).resolve().parent.parent
GOOD = """
backends:
  up: {dialect: openai, url: "http://127.0.0.1:9", model: qwen}
  vl: {dialect: openai, urls: ["http://127.0.0.1:9"], options: {extensions: vllm}}
routes:
  - {name: chat, dialect: openai, backend: up, models: [gpt-4o-mini, qwen]}
  - {name: edge, dialect: openai, backend: vl, prefix: /edge}
"""
BAD = """
listen: {port: -1}
backends:
  up: {dialect: openai, url: "http://h:1", urls: ["http://h:2"]}
  op: {dialect: openai, url: "http://h:1", options: {bogus: 1}}
routes:
  - {name: chat, dialect: openai, backend: nope}
"""


def gateway(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_check_config_prints_routes(tmp_path: Path):
    f = tmp_path / "gw.yaml"
    f.write_text(GOOD)
    r = gateway("check-config", str(f))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["ROUTE", "INBOUND", "PATHS", "BACKEND", "OUTBOUND"]
    assert len(lines) == 3
    chat, edge = lines[1], lines[2]
    assert chat.split()[:2] == ["chat", "openai"]
    assert "POST /v1/chat/completions" in chat and "GET /v1/models" in chat
    assert "(models: gpt-4o-mini, qwen)" in chat
    assert chat.split()[-2:] == ["up", "openai"]
    assert "POST /edge/v1/completions" in edge
    assert edge.split()[-2:] == ["vl", "openai"]


def test_check_config_bad_file_exits_2_one_line_per_problem(tmp_path: Path):
    f = tmp_path / "bad.yaml"
    f.write_text(BAD)
    r = gateway("check-config", str(f))
    assert r.returncode == 2
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines() == [
        "config error: listen.port: Input should be greater than or equal to 0",
        "config error: backends.up: exactly one of url, urls, simulate must be set",
        "config error: routes.0.backend: unknown backend 'nope'",
    ]
    # Once the structure is valid, the dialect options are checked too.
    f.write_text(BAD.replace("port: -1", "port: 1").replace(', urls: ["http://h:2"]', "").replace("nope", "up"))
    r = gateway("check-config", str(f))
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["config error: backends.op.options.bogus: Extra inputs are not permitted"]
    r = gateway("check-config", str(tmp_path / "absent.yaml"))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().endswith("cannot read: No such file or directory")


def test_serve_with_bad_config_exits_2(tmp_path: Path):
    f = tmp_path / "bad.yaml"
    f.write_text(BAD)
    r = gateway("serve", "--config", str(f), "--port", "0")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "config error: routes.0.backend: unknown backend 'nope'" in r.stderr.splitlines()
    # $GATEWAY_CONFIG is the fallback.
    r = gateway("serve", "--port", "0", env={"GATEWAY_CONFIG": str(f)})
    assert r.returncode == 2
    assert "config error: routes.0.backend: unknown backend 'nope'" in r.stderr.splitlines()


def test_simulate_unknown_dialect_exits_2():
    r = gateway("simulate", "--dialect", "klingon", "--port", "0")
    assert r.returncode == 2
    assert "unknown dialect 'klingon'" in r.stderr


async def start(*args: str) -> tuple[asyncio.subprocess.Process, str]:
    """Start a long-running command; return it and the URL from its "listening on" line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", *args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    seen = []
    while True:
        line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        assert line, "exited early:\n" + "".join(seen)
        seen.append(line)
        m = re.search(r"listening on (http://[\d.]+:(\d+))$", line.strip())
        if m:
            assert m.group(2) != "0"
            return proc, m.group(1)


async def stop(proc: asyncio.subprocess.Process) -> int:
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)  # as SIGTERM, without the drain delay
    return await asyncio.wait_for(proc.wait(), 15)


@pytest.fixture
async def procs() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    started: list[asyncio.subprocess.Process] = []
    yield started
    for p in started:
        if p.returncode is None:
            p.kill()
            await p.wait()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


async def test_serve_port_0_prints_bound_port(tmp_path: Path, procs):
    sim_port = free_port()
    sim, sim_url = await start("simulate", "--dialect", "openai", "--port", str(sim_port))
    procs.append(sim)
    assert sim_url == f"http://127.0.0.1:{sim_port}"

    f = tmp_path / "gw.yaml"
    f.write_text(
        f"backends:\n  up: {{dialect: openai, url: '{sim_url}'}}\n"
        "routes:\n  - {name: r, dialect: openai, backend: up}\n"
    )
    gw, url = await start("serve", "--config", str(f), "--host", "127.0.0.1", "--port", "0")
    procs.append(gw)
    async with aiohttp.ClientSession() as s:
        body = {"model": "m", "messages": [{"role": "user", "content": "ping over the network"}]}
        async with s.post(url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            out = await resp.json()
        assert out["choices"][0]["message"]["content"] == (
            "Simulated answer 0: you said ping over the network. The gateway works end to end."
        )
        async with s.get(url + "/readyz") as resp:
            assert resp.status == 200
    assert await stop(gw) == 0
    assert await stop(sim) == 0


async def test_simulate_answers_chat_over_the_network(procs):
    port = free_port()
    sim, url = await start("simulate", "--dialect", "openai", "--port", str(port), "--model", "tiny")
    procs.append(sim)
    async with aiohttp.ClientSession() as s:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        async with s.post(url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/event-stream"
            text = await resp.read()
        assert text.startswith(b"data: {")
        assert text.endswith(b"data: [DONE]\n\n")
        async with s.post(url + "/v1/chat/completions", json={**body, "model": "other"}) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "model_not_found"
    assert await stop(sim) == 0


async def test_simulate_writes_tool_calls_in_the_format_it_is_given(procs):
    port = free_port()
    sim, url = await start("simulate", "--dialect", "tgi", "--port", str(port), "--tool-parser", "mistral")
    procs.append(sim)
    tool = '{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}'
    prompt = f"<tools>\n{tool}\n</tools>\nuser: what is the weather in Oslo?\nassistant:"
    async with aiohttp.ClientSession() as s, s.post(url + "/generate", json={"inputs": prompt}) as resp:
        assert resp.status == 200
        assert (await resp.json())["generated_text"] == '[TOOL_CALLS][{"name": "get_weather", "arguments": {}}]'
    assert await stop(sim) == 0


def test_serve_with_missing_tls_files_is_a_config_error(tmp_path: Path):
    f = tmp_path / "tls.yaml"
    missing = tmp_path / "missing.pem"
    f.write_text(f"listen: {{tls: {{cert: '{missing}', key: '{missing}'}}}}\n" + GOOD)
    r = gateway("serve", "--config", str(f), "--port", "0")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if "config error" in ln]
    assert line.startswith("config error: listen.tls: cannot load the certificate or key:")
    f.write_text(GOOD.replace("model: qwen}", f"model: qwen, tls: {{ca: '{missing}'}}}}"))
    r = gateway("serve", "--config", str(f), "--port", "0")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("config error: backends.up.tls: cannot load a certificate, key or CA file:")
