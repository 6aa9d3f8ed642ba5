"""Reporting: a results file as Markdown tables, and those tables written into a document only
when someone asks for it.

The tables are made from the results file alone, so any run's can be shown again or put into
the docs afterwards:

    .venv/bin/python -m benchmarks.report RESULTS.json [--write-docs docs/performance.md]

`--write-docs` replaces what lies between the document's two marker lines (BEGIN and END below)
with the tables, or, where the document has none, appends them under a heading of their own;
nothing else in the document changes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.figures import Findings
from benchmarks.measure import Row, Settings
from benchmarks.procs import ROOT, nginx_binary
from benchmarks.scenarios import BASELINE

BEGIN = "<!-- benchmark tables: written by `python -m benchmarks.run --write-docs`; edit the run, not them -->"
END = "<!-- end of the benchmark tables -->"


def _first_line(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    out = (done.stdout + done.stderr).strip()
    return out.splitlines()[0] if out else "?"


def machine() -> dict[str, Any]:
    """What the figures were measured on, and the code's commit."""
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    git = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    return {
        "arch": platform.machine(),
        "cpu": cpu,
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "wrk": _first_line(["wrk", "-v"]).split(" [")[0],
        "nginx": _first_line([nginx_binary() or "nginx", "-v"]).split(": ", 1)[-1],
        "git": git.stdout.strip() or "?",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _n(v: float | None, fmt: str = ",.0f") -> str:
    return "-" if v is None else format(v, fmt)


def _x(ratios: dict[str, float], key: str) -> str:
    return f"{ratios[key]:.2f}x" if key in ratios else "-"


def _gateway_titles(found: Findings, kinds: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(proxy, scenario, title) of each gateway scenario with a row of these kinds, in run order."""
    out: list[tuple[str, str, str]] = []
    for r in found.rows:
        if r.proxy == "gateway" and r.kind in kinds and all(r.scenario != s for _, s, _ in out):
            out.append(("gateway", r.scenario, r.title))
    return out


def _loaded(found: Findings, named: list[tuple[str, str, str]], connections: int, events: int) -> list[str]:
    out = [
        f"| {connections} connections | JSON req/s | x floor | x direct | CPU us/req "
        f"| {events}-event streams/s | x floor | x direct | CPU us/event |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for proxy, key, title in named:
        cells = [title]
        for kind, cpu in (("json", "cpu_us_per_req"), ("stream", "cpu_us_per_event")):
            row = found.find(proxy, key, kind)
            if row is None or row.failed:
                cells += ["FAILED", "", "", ""]
            else:
                digits = ",.0f" if cpu == "cpu_us_per_req" else ".2f"
                cells += [_n(row.rps), _x(row.vs_floor, "rps"), _x(row.vs_direct, "rps"), _n(getattr(row, cpu), digits)]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _latency(found: Findings, named: list[tuple[str, str, str]]) -> list[str]:
    out = [
        "| 1 connection, JSON | p50 ms | p99 ms | added p50 ms | the floor's added p50 beside it, ms |",
        "|---|---:|---:|---:|---:|",
    ]
    direct = found.good("direct", BASELINE.key, "latency")
    for proxy, key, title in named:
        row = found.find(proxy, key, "latency")
        if row is None:
            continue  # a scenario measured at many connections only
        if row.failed:
            out.append(f"| {title} | FAILED | | | |")
        else:
            beside = row.floor_p50_ms - direct.p50_ms if row.floor_p50_ms and direct else None
            cells = [f"{row.p50_ms:.3f}", f"{row.p99_ms:.3f}", _n(row.added_p50_ms, "+.3f"), _n(beside, "+.3f")]
            out.append(f"| {title} | " + " | ".join(cells) + " |")
    return out


def _paced(found: Findings, s: Settings) -> list[str]:
    out = [
        f"| paced streams: {s.paced_connections} connections, {s.paced_gap_ms:g} ms between events "
        "| streams/s | events/s | CPU us/event | x floor CPU/event |",
        "|---|---:|---:|---:|---:|",
    ]
    for proxy, key, title in [("floor", BASELINE.key, "aiohttp floor"), *_gateway_titles(found, ("paced",))]:
        row = found.find(proxy, key, "paced")
        if row is None or row.failed:
            out.append(f"| {title} | FAILED | | | |")
        else:
            cells = [
                _n(row.rps),
                _n(row.events_per_s),
                _n(row.cpu_us_per_event, ".2f"),
                _x(row.vs_floor, "cpu_per_req"),
            ]
            out.append(f"| {title} | " + " | ".join(cells) + " |")
    return out


def _memory_and_workers(found: Findings, s: Settings, cores: dict[str, Any]) -> list[str]:
    out: list[str] = []
    mem = found.memory
    if mem.get("idle"):
        out += ["", f"Gateway memory: idle after start VmRSS {mem['idle']['VmRSS']:.1f} MiB."]
        if "after_soak" in mem:
            before, after = mem["before_soak"], mem["after_soak"]
            out[-1] += (
                f" After the scenarios (warm) {before['VmRSS']:.1f} MiB; after {mem['soak_requests']:,} more"
                f" JSON requests {after['VmRSS']:.1f} MiB ({mem['growth_mib']:+.1f} MiB);"
                f" peak (VmHWM) {after['VmHWM']:.1f} MiB."
            )
    one, two = found.workers.get("one"), found.workers.get("two")
    if one and two:
        each = " + ".join(f"{c:.2f}" for c in two["cpu_s_each"])
        both = cores["both"]
        out += [
            "",
            f"| JSON pass-through, {s.connections} connections | req/s | req per gateway CPU second "
            "| gateway CPU s (per worker) |",
            "|---|---:|---:|---:|",
            f"| 1 worker (core {cores['proxy']}; the runs either side of the median round) "
            f"| {_n(one['rps'])} | {_n(one['req_per_cpu_s'])} | - |",
            f"| 2 workers (one on core {both[0]}, one on core {both[-1]} with nginx and wrk) "
            f"| {_n(two['rps'])} | {_n(two['req_per_cpu_s'])} | {each} |",
        ]
    return out


def _disturbed(rows: list[Row]) -> list[str]:
    """On a shared machine other work may take the proxy's core: where it did."""
    disturbed = [r for r in rows if r.others_busy is not None and r.others_busy > 0.1]
    if not disturbed:
        return []
    worst = max(disturbed, key=lambda r: r.others_busy or 0.0)
    return [
        "",
        f"Other processes used more than 0.1 of the proxy's core in {len(disturbed)} of "
        f"{len(rows)} runs (at most {worst.others_busy:.2f}, {worst.proxy} {worst.scenario} {worst.kind}); "
        "their requests/s are low by as much, CPU per request is not. `others_busy` in the JSON has each.",
    ]


def _peers(found: Findings, s: Settings) -> list[str]:
    """The peers beside the gateway and the floor, scenario by scenario: requests/s and requests
    per CPU second of each (the CPU figure holds on a machine whose speed moves)."""
    ratios = found.peer_ratios()
    if not ratios and not found.peers_skipped and not found.peer_problems:
        return []
    out = [
        "",
        f"| beside the peers, {s.connections} connections | kind | req/s | req per CPU second "
        "| the gateway's req/s | the gateway's req per CPU second | gateway / peer, per CPU second |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind in ("json", "stream"):
        floor = found.good("floor", BASELINE.key, kind)
        if floor is not None and floor.req_per_cpu_s:
            cells = [_n(floor.rps), _n(floor.req_per_cpu_s), "", "", ""]
            out.append(f"| aiohttp floor (OpenAI chat) | {kind} | " + " | ".join(cells) + " |")
    for row, gw, v in ratios:
        cells = [_n(row.rps), _n(row.req_per_cpu_s), _n(gw.rps), _n(gw.req_per_cpu_s), f"{v:.2f}x"]
        out.append(f"| {row.title}: {gw.title} | {row.kind} | " + " | ".join(cells) + " |")
    for name, why in found.peers_skipped.items():
        out.append(f"| {name} | - | skipped: {why} | | | | |")
    for p in found.peer_problems:
        out.append(
            f"| {p['proxy']}: {p['scenario']} | {p['kind']} | failed its answer check: {p['problem'][:120]} | | | | |"
        )
    return out


def markdown(results: dict[str, Any]) -> str:
    """The run as Markdown: machine and command, then one table per measurement."""
    info, cores = results["machine"], results["cores"]
    s = Settings(**results["settings"])
    found = Findings.of(results)
    out = [
        f"{info['date']}; {info['arch']}, {info['cpu']}, {info['nproc']} cores, Linux {info['kernel']}; Python "
        f"{info['python']}, aiohttp {info['aiohttp']}, {info['wrk']}, nginx {info['nginx']}; gateway at {info['git']}.",
        f"Command: `{results['command']}`. Proxy on core {cores['proxy']}; nginx, wrk and the paced upstream on core "
        f"{cores['load']}. {s.seconds} s per run; wrk -t1. Each gateway JSON, stream, paced and one-connection "
        f"row is the median of {s.rounds} round(s), each against the floor runs just before and after it.",
        "",
    ]
    named = [("direct", BASELINE.key, "direct to nginx"), ("floor", BASELINE.key, "aiohttp floor")]
    named += _gateway_titles(found, ("json", "stream", "latency"))
    out += _loaded(found, named, s.connections, s.stream_events)
    out += ["", *_latency(found, named), "", *_paced(found, s)]
    out += _memory_and_workers(found, s, cores)
    out += _peers(found, s)
    out += _disturbed(found.rows)
    out += ["", "| target | measured | met |", "|---|---|---|"]
    for t in results["targets"]:
        met = {True: "yes", False: "**no**", None: "-"}[t["met"]]
        out.append(f"| {t['target']} | {t['measured']} | {met} |")
    return "\n".join(out)


def write_docs(doc: Path, tables: str) -> None:
    """The tables into `doc` between its marker lines (appended with them where it has none)."""
    block = f"{BEGIN}\n\n{tables}\n\n{END}"
    text = doc.read_text() if doc.exists() else ""
    start, end = text.find(BEGIN), text.find(END)
    if start >= 0 and end > start:
        text = text[:start] + block + text[end + len(END) :]
    else:
        text = f"{text.rstrip()}\n\n## The latest run\n\n{block}\n".lstrip()
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.report", description="A benchmark run's tables.")
    ap.add_argument("results", type=Path, help="a results file written by python -m benchmarks.run")
    ap.add_argument("--write-docs", type=Path, metavar="FILE", help="also write the tables into FILE (see above)")
    args = ap.parse_args(argv)
    tables = markdown(json.loads(args.results.read_text()))
    print(tables)
    if args.write_docs is not None:
        write_docs(args.write_docs, tables)
        print(f"tables written to {args.write_docs}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
