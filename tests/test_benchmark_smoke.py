"""The performance benchmark (`python -m benchmarks.run`) runs end to end in its quick mode: every
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

from benchmarks import report
from benchmarks.run import EXIT_NO_TOOLS
from benchmarks.scenarios import BASELINE, PACED, SCENARIOS

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmark_runs_clean(tmp_path):
    out = tmp_path / "results.json"
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode == EXIT_NO_TOOLS:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr[-4000:]
    results = json.loads(out.read_text())
    assert results["ok"], results["failures"]

    # Every scenario was checked before its load, and every check passed.
    expected = {(p, BASELINE.key, k) for p in ("direct", "floor") for k in ("json", "stream", "latency")}
    expected |= {("floor", BASELINE.key, "paced")}
    expected |= {("gateway", sc.key, k) for sc in SCENARIOS for k in ("json", "stream")}
    expected |= {("gateway", sc.key, "latency") for sc in SCENARIOS if sc.latency}
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

    # The tables are made from the results file alone, and go into a document only when asked:
    # between its marker lines, once, however often they are written.
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nHow it is measured.\n")
    for _ in range(2):
        again = subprocess.run(
            [sys.executable, "-m", "benchmarks.report", str(out), "--write-docs", str(doc)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 0, again.stderr
    assert again.stdout == r.stdout
    text = doc.read_text()
    assert text.startswith("# Performance\n\nHow it is measured.\n")
    assert text.count(report.BEGIN) == text.count(report.END) == 1
    assert r.stdout.strip() in text


def test_a_gateway_row_is_its_median_round_each_against_the_floor_beside_it(tmp_path):
    """Rounds interleave with floor runs (F G F G F G F); the row kept is the round whose ratio to
    the mean of its two floor runs is the median, and a failed round fails the row."""
    from benchmarks.measure import Row, median_round

    def runs(figures: list[float], proxy: str, log: list[str]):
        it = iter(figures)

        def run() -> Row:
            row = Row(proxy, "s", "t", "json", 1, 1, rps=next(it), cpu_us_per_req=100.0)
            log.append(f"{proxy}:{row.rps:g}")
            return row

        return run

    order: list[str] = []
    # Ratios: 50/mean(100,50)=0.667, 90/mean(50,100)=1.2, 60/mean(100,100)=0.6: the first is the median.
    row = median_round(3, runs([50, 90, 60], "gateway", order), runs([100, 50, 100, 100], "floor", order))
    assert order == ["floor:100", "gateway:50", "floor:50", "gateway:90", "floor:100", "gateway:60", "floor:100"]
    assert (row.rps, row.floor_rps, row.round_ratios) == (50, 75, [0.667, 1.2, 0.6])

    def failing() -> Row:
        return Row("gateway", "s", "t", "json", 1, 1, rps=10.0, failed=["wrk counted errors"])

    row = median_round(3, failing, runs([100, 100], "floor", []))
    assert row.failed and row.rps == 10.0

    # One connection: the ratio is of p50, the gateway's over the floor's beside it.
    def latency(figures: list[float], proxy: str):
        it = iter(figures)
        return lambda: Row(proxy, "s", "t", "latency", 1, 1, rps=1.0, p50_ms=next(it), cpu_us_per_req=1.0)

    row = median_round(3, latency([0.3, 0.5, 0.4], "gateway"), latency([0.3, 0.3, 0.5, 0.3], "floor"), by="p50")
    assert (row.p50_ms, row.floor_p50_ms, row.round_ratios) == (0.4, 0.4, [1.0, 1.25, 1.0])
