"""The performance benchmark: the stub direct, the bare aiohttp floor, and the gateway, in one run.

    .venv/bin/python -m benchmarks.run [--seconds 5] [--quick] [--out FILE] [--write-docs FILE]

Run from the repository's root. It installs wrk and nginx when they are missing, starts every
process it measures (nginx serving the stub, benchmarks/stub.py; the paced upstream,
benchmarks/paced.py; the floor, benchmarks/floor.py; the gateway), checks each scenario's answer
before loading it, drives the load with wrk, reads CPU and memory from /proc, and writes the
figures as JSON (under benchmarks/results/, which git ignores, unless --out) and Markdown tables
(stdout; into a document only with --write-docs). Every process it started is ended when it
stops, failed or interrupted. This module is the command line; the package's docstring names
the module of each part.

Placement: the proxy under test (the floor or the gateway, one process, one at a time) runs on
the first core; nginx, wrk, the paced upstream and this script share the second. The proxy's
CPU seconds (utime + stime from /proc/PID/stat) around each wrk run, divided by the requests
(or streamed events) served, say what a request costs it whatever the load generator does.

What is measured, each figure also as a ratio to the floor's and to the direct row's of the same
kind from this run (a gateway JSON, stream or paced row: the median of --rounds runs, each
against the floor runs just before and after it):
- JSON and 200-event streams at 64 connections (16 with --quick): requests/s, p50, p99, CPU;
- JSON at one connection: p50, p99, and the p50 added to the direct one;
- paced streams (one event per write, a gap apart, from benchmarks/paced.py) at 16 connections:
  CPU per streamed event, floor against the gateway's pass-through and OpenAI -> MindIE routes;
- the gateway's memory idle after start and over 100,000 JSON requests (not with --quick);
- `--workers 2`, one worker pinned to each core, against one worker on JSON pass-through, in
  rounds like the rows above (not with --quick).

Exit status: 0 when every answer was complete and no request failed, 1 otherwise, 2 on a
setup failure, 3 when wrk or nginx is missing and cannot be installed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.measure import Settings
from benchmarks.procs import ROOT, Procs, SetupError, ToolsMissing, ensure_tools, log
from benchmarks.suite import Suite

RESULTS = ROOT / "benchmarks" / "results"
EXIT_FAILED, EXIT_SETUP, EXIT_NO_TOOLS = 1, 2, 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Direct to the stub, the aiohttp floor and the gateway, measured with wrk in one run.",
    )
    ap.add_argument("--seconds", type=int, help="seconds per wrk run (default 5; 1 with --quick)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="1-second runs, 16 connections, wrk checks every answer; "
        "no memory soak and no workers run; results to a temporary file unless --out",
    )
    ap.add_argument("--out", type=Path, help=f"results JSON (default {RESULTS.relative_to(ROOT)}/run-<UTC time>.json)")
    ap.add_argument(
        "--write-docs",
        type=Path,
        metavar="FILE",
        help="also write the tables into FILE (docs/performance.md), between its marker lines",
    )
    ap.add_argument("--connections", type=int, help="connections for the JSON and stream runs (default 64; 16 quick)")
    ap.add_argument("--paced-connections", type=int, help="connections for paced streams (default 16; 8 quick)")
    ap.add_argument("--paced-gap-ms", type=float, default=1.0, help="gap between paced events (default 1)")
    ap.add_argument("--soak-requests", type=int, default=100_000, help="JSON requests for the memory soak")
    ap.add_argument(
        "--rounds",
        type=int,
        help="gateway runs per JSON, stream and paced row, each between floor runs; the row is the "
        "median round (default 3; 1 with --quick)",
    )
    ap.add_argument(
        "--peers",
        action=argparse.BooleanOptionalAction,
        help="measure vllm-router and Portkey's gateway beside the gateway, installing them into "
        "benchmarks/.peers when missing (default: yes; no with --quick)",
    )
    ap.add_argument("--only", help="measure only these scenarios (comma-separated keys of benchmarks/scenarios.py)")
    return ap.parse_args(argv)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def default_out(quick: bool) -> Path:
    if quick:
        return Path(tempfile.gettempdir()) / "gateway-benchmark-quick.json"
    return RESULTS / datetime.datetime.now(datetime.UTC).strftime("run-%Y%m%d-%H%M%S.json")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quick = args.quick
    settings = Settings(
        seconds=args.seconds or (1 if quick else 5),
        connections=args.connections or (16 if quick else 64),
        paced_connections=args.paced_connections or (8 if quick else 16),
        paced_gap_ms=args.paced_gap_ms,
        soak_requests=args.soak_requests,
        quick=quick,
        rounds=args.rounds or (1 if quick else 3),
        peers=not quick if args.peers is None else args.peers,
        only=tuple(args.only.split(",")) if args.only else (),
    )
    out = args.out or default_out(quick)
    command = " ".join([".venv/bin/python -m benchmarks.run", *(sys.argv[1:] if argv is None else argv)])
    # SIGTERM ends the run as Ctrl-C does: through the finally that stops every process. SIGINT
    # is set too, since a shell starting this in the background leaves it ignored.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ensure_tools()
    except ToolsMissing as e:
        log(f"cannot run the benchmark: {e}")
        return EXIT_NO_TOOLS
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        log("only one core: the proxy shares it with nginx and wrk, and the figures say little")
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:
        # Started by root, nginx's worker runs as nobody, and must read the stub's files.
        os.chmod(tmp, 0o755)
        procs = Procs(Path(tmp))
        suite = Suite(settings, Path(tmp), procs, cores)
        # This script (correctness checks, /proc reads) stays off the proxy's core.
        os.sched_setaffinity(0, set(suite.load_core))
        try:
            suite.run()
        except SetupError as e:
            log(f"setup failed: {e}")
            nginx_log = Path(tmp) / "nginx-error.log"
            if nginx_log.exists() and nginx_log.read_text().strip():
                log(f"nginx's error log:\n{nginx_log.read_text()[-2000:]}")
            return EXIT_SETUP
        except KeyboardInterrupt:
            log("interrupted: stopping what was started")
            return 130
        finally:
            procs.stop_all()
        nginx_errors = (Path(tmp) / "nginx-error.log").read_text(errors="replace")
    found = suite.found
    found.ratios()
    failures = found.failures()
    results = {
        "machine": report.machine(),
        "command": command,
        "settings": asdict(settings),
        "cores": {"proxy": suite.proxy_core[0], "load": suite.load_core[0], "both": suite.both_cores},
        "placement": {
            "proxy": f"core {suite.proxy_core[0]}: the floor or the gateway (one process), one at a time",
            "load": f"core {suite.load_core[0]}: nginx, wrk -t1, the paced upstream, this script",
            "workers": f"cores {','.join(map(str, suite.both_cores))}: the gateway's two workers, one pinned to "
            f"each; nginx and wrk stay on core {suite.load_core[0]}, so the second worker shares it with them",
        },
        "rows": [asdict(r) for r in found.rows],
        "correctness": found.correctness,
        "memory": found.memory,
        "workers": found.workers,
        "peers_skipped": found.peers_skipped,
        "peer_problems": found.peer_problems,
        "targets": found.targets(quick),
        "nginx_errors": nginx_errors.strip().splitlines()[-20:],
        "failures": failures,
        "ok": not failures,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    tables = report.markdown(results)
    print(tables)
    log(f"results: {out}")
    if args.write_docs is not None:
        report.write_docs(args.write_docs, tables)
        log(f"tables written to {args.write_docs}")
    if failures:
        log("FAILED:\n  " + "\n  ".join(failures))
        return EXIT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
