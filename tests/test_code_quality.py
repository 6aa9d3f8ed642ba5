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
