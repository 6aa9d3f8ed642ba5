"""Where a config comes from: a YAML file (its read and syntax errors as one-line messages), or
the embedded default that `gateway serve` runs without one. Its checks are gateway.config's."""

from pathlib import Path
from typing import Any

import yaml

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


def embedded_default() -> Config:
    """The config used when none is given: every dialect clients speak, mounted where its `Demo`
    says, in front of a simulated backend (of its own dialect unless the demo names another)."""
    backends: dict[str, Any] = {}
    routes: list[dict[str, Any]] = []
    for name in registry.inbound_names():
        demo = registry.get(name).demo
        served_by = demo.backend or name
        backend = f"sim-{served_by}"
        backends[backend] = {"dialect": served_by, "simulate": True, "model": "sim-model"}
        route: dict[str, Any] = {"name": name, "dialect": name, "backend": backend}
        if demo.prefix:
            route["prefix"] = demo.prefix
        routes.append(route)
    return parse_config({"listen": {"host": "127.0.0.1", "port": 8080}, "backends": backends, "routes": routes})
