"""Where a config comes from: a YAML file (its read and syntax errors as one-line messages), or
the embedded default that `gateway serve` runs without one. Its checks are gateway.config's."""

from pathlib import Path
from typing import Any

import yaml

from gateway.adapters import DEMO_MODEL
from gateway.config import Config, ConfigError, parse_config
from gateway.dialects import registry


def load_config(path: str | Path) -> Config:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError([f"{path}: cannot read: {e.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError([f"{path}: not valid YAML{where}: {problem}"]) from None
    return parse_config(data)


def _simulated(dialect: str) -> dict[str, Any]:
    """A simulated backend of `dialect`; one that carries only text gets the demo model's chat
    template and the tool-call format its demo names, so tools work through it."""
    conf: dict[str, Any] = {"dialect": dialect, "simulate": True, "model": "sim-model"}
    parser = registry.get(dialect).demo.tool_parser
    if parser:
        conf.update(tool_parser=parser, tokenizer=DEMO_MODEL)
    return conf


def embedded_default() -> Config:
    """The config used when none is given: every dialect clients speak, mounted where its `Demo`
    says, in front of a simulated backend (of its own dialect unless the demo names another),
    and the clients a dialect's demo names in front of its simulated server."""
    backends: dict[str, Any] = {}
    routes: list[dict[str, Any]] = []
    for name in registry.inbound_names():
        demo = registry.get(name).demo
        served_by = demo.backend or name
        backend = f"sim-{served_by}"
        backends[backend] = _simulated(served_by)
        route: dict[str, Any] = {"name": name, "dialect": name, "backend": backend}
        if demo.prefix:
            route["prefix"] = demo.prefix
        routes.append(route)
    for name in registry.available():
        for client, prefix in registry.get(name).demo.fronts:
            backend = f"sim-{name}"
            backends.setdefault(backend, _simulated(name))
            routes.append({"name": f"{client}-{name}", "dialect": client, "prefix": prefix, "backend": backend})
    return parse_config({"listen": {"host": "127.0.0.1", "port": 8080}, "backends": backends, "routes": routes})
