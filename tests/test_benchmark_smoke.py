"""The performance benchmark (benchmarks/run.py) runs end to end in its quick mode: every
scenario's answer is checked complete and right before its load, and under load no request
failed and wrk's script found no incomplete answer. Speed is not checked.

It needs wrk and nginx; the benchmark installs them with apt-get when it may (root, or
password-less sudo). Where it cannot, the benchmark exits with EXIT_NO_TOOLS and this test is
skipped with its reason.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.run import BASELINE, EXIT_NO_TOOLS, PACED, SCENARIOS

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmark_runs_clean(tmp_path):
    out = tmp_path / "results.json"
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if r.returncode == EXIT_NO_TOOLS:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr[-4000:]
    results = json.loads(out.read_text())
    assert results["ok"], results["failures"]

    # Every scenario was checked before its load, and every check passed.
    expected = {(p, BASELINE.key, k) for p in ("direct", "floor") for k in ("json", "stream", "latency")}
    expected |= {("floor", BASELINE.key, "paced")}
    expected |= {("gateway", sc.key, k) for sc in SCENARIOS for k in ("json", "stream", "latency")}
    expected |= {("gateway", sc.key, "paced") for sc in PACED}
    checks = {(c["proxy"], c["scenario"], c["kind"]): c for c in results["correctness"]}
    assert set(checks) == expected
    assert all(c.get("ok") for c in checks.values()), [c for c in checks.values() if not c.get("ok")]

    # Under load: answers served, none failed, and wrk's script saw every one complete.
    rows = {(row["proxy"], row["scenario"], row["kind"]): row for row in results["rows"]}
    assert set(rows) == expected
    for key, row in rows.items():
        assert row["requests"] > 0, key
        assert row["errors"] == {}, (key, row["errors"])
        assert row["checked"] == row["requests"], key
        assert row["incomplete"] == 0, key
        assert not row["failed"], (key, row["failed"])

    assert "| target | measured | met |" in r.stdout
