"""Command line: `gateway serve`, `gateway check-config`, `gateway explain`, `gateway simulate`."""

import argparse
import logging
import os
import sys
from typing import Any

from gateway import jsonutil
from gateway.adapters.toolcalls import PARSERS
from gateway.config import ConfigError
from gateway.configfile import load_config

log = logging.getLogger("gateway")


def _config_failed(e: ConfigError) -> int:
    for line in e.lines:
        print(f"config error: {line}", file=sys.stderr)
    return 2


def cmd_serve(args: argparse.Namespace) -> int:
    from gateway.reload import ConfigSource

    source = ConfigSource.given(args.config)
    try:
        # Certificate files the config names are checked too: a missing or bad one is a config
        # error (exit 2), not a failure to listen.
        loaded = source.load()
    except ConfigError as e:
        return _config_failed(e)
    config = loaded.config
    from gateway import logs

    logs.setup(config.logging.format, args.log_level or config.logging.level)
    if not config.logging.access_log:
        logs.ACCESS.disabled = True
    host = args.host or config.listen.host
    port = args.port if args.port is not None else config.listen.port
    if args.workers < 1:
        print("--workers must be at least 1", file=sys.stderr)
        return 2
    if args.watch_config and source.path is None:
        log.warning(
            "--watch-config: no configuration file was given (the embedded default is in use): nothing to watch"
        )
    if args.workers > 1:
        from gateway.workers import serve_workers

        return serve_workers(source, loaded, host, port, args.workers, args.log_level, args.watch_config)
    from gateway.lifecycle import Gateway
    from gateway.server import run_loop

    gateway = Gateway(source, loaded, host, port, log_level=args.log_level, watch=args.watch_config)
    try:
        run_loop(gateway.run())
    except OSError as e:
        print(f"cannot listen on {host}:{port}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file)
    except ConfigError as e:
        return _config_failed(e)
    from gateway.config import route_paths

    paths = route_paths(config)
    rows = [("ROUTE", "INBOUND", "PATHS", "BACKEND", "OUTBOUND")]
    for r in config.routes:
        b = config.backends[r.backend]
        shown = ", ".join(f"{m} {p}" for m, p in paths[r.name])
        models = f" (models: {', '.join(r.models)})" if r.models else ""
        rows.append((r.name, r.dialect, shown + models, r.backend, b.dialect))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4])
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    """Exit 0 when the request is explained (a request the gateway would refuse included: the
    explanation shows the client's error), 2 when it cannot be (the config, the route, the path,
    the request file or a --header)."""
    import asyncio

    from gateway.explain import ExplainError, explain, render_json, render_text
    from gateway.reload import ConfigSource

    try:
        config = ConfigSource.given(args.config).load().config
    except ConfigError as e:
        return _config_failed(e)
    try:
        if args.request == "-":
            body = sys.stdin.buffer.read()
        else:
            with open(args.request, "rb") as f:
                body = f.read()
    except OSError as e:
        print(f"{args.request}: cannot read: {e.strerror}", file=sys.stderr)
        return 2
    headers: list[tuple[str, str]] = []
    for given in args.header:
        name, colon, value = given.partition(":")
        if not colon or not name.strip():
            print(f"--header {given!r}: expected 'Name: value'", file=sys.stderr)
            return 2
        headers.append((name.strip(), value.strip()))
    try:
        explained = asyncio.run(explain(config, args.route, args.path, body, dict(headers)))
    except ExplainError as e:
        print(str(e), file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.buffer.write(render_json(explained) + b"\n")
    else:
        sys.stdout.write(render_text(explained))
    return 0


def sim_options(pairs: list[str]) -> dict[str, Any]:
    """`--option NAME=VALUE` pairs; a value is JSON when it parses as JSON, else a string."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, eq, text = pair.partition("=")
        if not eq or not name:
            raise ValueError(f"--option {pair!r}: expected NAME=VALUE")
        try:
            out[name] = jsonutil.loads(text)
        except jsonutil.JSONDecodeError:
            out[name] = text
    return out


def cmd_simulate(args: argparse.Namespace) -> int:
    from gateway.config import Limits
    from gateway.dialects import registry as dialects
    from gateway.server import run_loop, serve
    from gateway.simulator.server import create_sim_app

    if args.dialect not in dialects.available():
        print(f"unknown dialect {args.dialect!r}; available: {', '.join(dialects.available())}", file=sys.stderr)
        return 2
    try:
        app = create_sim_app(
            args.dialect,
            args.model,
            args.token_delay_ms / 1000.0,
            sim_options(args.option),
            tool_parser=args.tool_parser,
        )
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 2
    try:
        run_loop(serve(app, args.host, args.port, Limits()))
    except OSError as e:
        print(f"cannot listen on {args.host}:{args.port}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gateway", description="LLM protocol gateway")
    # No default here: `serve` falls back to the config's logging.level.
    p.add_argument("--log-level", default=os.environ.get("GATEWAY_LOG_LEVEL"))
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the gateway")
    s.add_argument("--config", help="config file (default: $GATEWAY_CONFIG, else the embedded default)")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--workers", type=int, default=1, help="worker processes sharing the port (SO_REUSEPORT); default 1")
    s.add_argument(
        "--watch-config",
        action="store_true",
        help="reload the config file when it (or a certificate file it names) changes, as SIGHUP does",
    )
    s.set_defaults(func=cmd_serve)

    c = sub.add_parser("check-config", help="validate a config file and print its routes")
    c.add_argument("file")
    c.set_defaults(func=cmd_check_config)

    x = sub.add_parser("explain", help="show what the gateway would do with a client request, without sending anything")
    x.add_argument("--config", help="config file (default: $GATEWAY_CONFIG, else the embedded default)")
    x.add_argument("--route", required=True, help="the route the request is sent to, by name")
    x.add_argument("--path", help="which of the route's inference paths (default: its chat path, or its only one)")
    x.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="a header of the client's request (X-Request-Id, the Inference Extension's); repeatable",
    )
    x.add_argument("--json", action="store_true", help="print the explanation as JSON (docs/explain.md)")
    x.add_argument("request", help="the client's request body (a file; - for standard input)")
    x.set_defaults(func=cmd_explain)

    m = sub.add_parser("simulate", help="run a simulated inference server")
    m.add_argument("--dialect", required=True)
    m.add_argument("--host", default="127.0.0.1")
    m.add_argument("--port", type=int, default=8000)
    m.add_argument("--model", help="serve only this model name (default: accept any)")
    m.add_argument("--token-delay-ms", type=float, default=0.0, help="pause before each streamed token")
    m.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="describe the simulated server with the dialect's backend options (e.g. flavor=vllm); repeatable",
    )
    m.add_argument(
        "--tool-parser",
        choices=sorted(PARSERS),
        help="the format its model writes tool calls in when its prompt shows tools (a text-only server)",
    )
    m.set_defaults(func=cmd_simulate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=(args.log_level or "INFO").upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
