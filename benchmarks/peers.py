"""The peers: other proxies in front of the same stub, loaded as the floor is, for a table beside it.

- vllm-router (Rust, from PyPI: `pip install vllm-router`), a router in front of OpenAI-compatible
  servers: the OpenAI chat pass-through, whole and streamed;
- Portkey's gateway (Node, from npm: `@portkey-ai/gateway`), a gateway that speaks OpenAI to its
  clients: the same pass-through (provider `openai`), and OpenAI chat to a Messages server
  (provider `anthropic`), each with a custom host on the stub.

Each is installed into a folder of its own under `benchmarks/.peers/` when it is not there yet
(pip into a virtual environment, npm into a prefix); one that cannot be had is skipped with the
reason, and the run goes on. They are pinned to the proxy's core like the floor, one at a time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.procs import ROOT, log

PEERS_DIR = ROOT / "benchmarks" / ".peers"
VLLM_ROUTER = "vllm-router==0.1.17"
PORTKEY = "@portkey-ai/gateway@1.15.2"


@dataclass(frozen=True)
class PeerRoute:
    """One scenario a peer serves: the gateway scenario it stands beside, the peer's path, and
    the headers that pick its provider (Portkey), with `{stub}` for the stub's url."""

    scenario: str
    path: str
    stream_path: str
    headers: dict[str, str] = field(default_factory=dict)

    def headers_for(self, stub: str, stream: bool) -> dict[str, str]:
        return {k: v.replace("{stub}", stub + ("/stream" if stream else "")) for k, v in self.headers.items()}


@dataclass(frozen=True)
class Peer:
    name: str
    title: str
    routes: tuple[PeerRoute, ...]


def _portkey(provider: str, base: str) -> dict[str, str]:
    return {
        "x-portkey-provider": provider,
        "x-portkey-custom-host": "{stub}" + base,
        "Authorization": "Bearer sk-bench",
        "x-api-key": "sk-bench",
        "anthropic-version": "2023-06-01",
    }


CHAT = "/v1/chat/completions"
PEERS = (
    Peer("vllm-router", "vllm-router 0.1.17 (Rust)", (PeerRoute("openai-openai", CHAT, CHAT),)),
    Peer(
        "portkey",
        "Portkey gateway 1.15.2 (Node)",
        (
            PeerRoute("openai-openai", CHAT, CHAT, _portkey("openai", "/v1")),
            PeerRoute("openai-anthropic", CHAT, CHAT, _portkey("anthropic", "/rec/anthropic/v1")),
        ),
    ),
)


def _run(argv: list[str]) -> bool:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        log(f"  {' '.join(argv[:3])}...: exit {done.returncode}: {(done.stdout + done.stderr)[-400:]}")
    return done.returncode == 0


def vllm_router() -> Path | str:
    """The vllm-router program, installed when missing; or why it cannot be had."""
    venv = PEERS_DIR / "vllm-router"
    binary = venv / "bin" / "vllm-router"
    if not binary.exists():
        log(f"  installing {VLLM_ROUTER} into {venv}")
        if not _run([sys.executable, "-m", "venv", str(venv)]) or not _run(
            [str(venv / "bin" / "pip"), "install", "-q", VLLM_ROUTER]
        ):
            return f"pip install {VLLM_ROUTER} failed"
    return binary if binary.exists() else f"{VLLM_ROUTER} installed no vllm-router program"


def portkey() -> Path | str:
    """Portkey's server script, installed when missing; or why it cannot be had."""
    prefix = PEERS_DIR / "portkey"
    script = prefix / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    if not script.exists():
        if not (shutil.which("node") and shutil.which("npm")):
            return "node and npm are not installed"
        log(f"  installing {PORTKEY} into {prefix}")
        if not _run(["npm", "install", "--silent", "--prefix", str(prefix), PORTKEY]):
            return f"npm install {PORTKEY} failed"
    return script if script.exists() else f"{PORTKEY} has no build/start-server.js"


def argv(peer: Peer, port: int, stub: str, stream: bool) -> list[str] | str:
    """The command that serves `peer` on `port` in front of the stub; or why it cannot."""
    if peer.name == "vllm-router":
        found = vllm_router()
        if isinstance(found, str):
            return found
        url = stub + ("/stream" if stream else "")
        return [str(found), "--host", "127.0.0.1", "--port", str(port), "--worker-urls", url, "--policy", "round_robin"]
    found = portkey()
    if isinstance(found, str):
        return found
    node = shutil.which("node") or "node"
    return [node, str(found), f"--port={port}", "--headless"]


def environment() -> dict[str, str]:
    # Portkey logs each request unless told otherwise; the floor logs nothing.
    return {**os.environ, "NODE_ENV": "production", "LOG_LEVEL": "error"}
