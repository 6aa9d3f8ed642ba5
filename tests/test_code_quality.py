"""The package stays clean under the project's linters: ruff, strict mypy, and the import-linter
contracts in pyproject.toml (the layers point down; no import cycles, type-only imports included)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean():
    r = _run("ruff", "check", "gateway", "tests", "benchmarks")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict_is_clean():
    r = _run("mypy", "gateway")
    assert r.returncode == 0, r.stdout + r.stderr


def test_records_refuse_assignment_under_the_type_checker():
    """Records (gateway.records) are plain dataclasses at run time: strict mypy, run over the
    package above, is what keeps their fields from being assigned."""
    code = "from gateway.neutral.types import Request, Task\nr = Request(task=Task.CHAT, inbound='x')\n"
    code += "r.stream = True\n"
    r = _run("mypy", "--strict", "-c", code)
    assert r.returncode == 1, r.stdout + r.stderr
    assert 'Property "stream" defined in "Request" is read-only' in r.stdout, r.stdout


def test_layers_point_down():
    r = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout
