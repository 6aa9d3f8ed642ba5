"""Reading a config: `${VAR}` expansion, validation into the models, the checks across keys
(dialect options, routes' paths), and one-line error messages naming each key path."""

import os
import re
from typing import Any

from pydantic import ValidationError

from gateway.config.models import Config, ConfigError, reference_problems
from gateway.dialects import registry


def _raw_reference_problems(data: dict[str, Any]) -> list[str]:
    """The same checks on the raw file, so they are reported alongside other field problems
    (pydantic skips the model validator once any field is invalid)."""
    backends, routes = data.get("backends"), data.get("routes")
    if not isinstance(backends, dict) or not isinstance(routes, list):
        return []
    pairs = [(r.get("name"), r.get("backend")) if isinstance(r, dict) else (None, None) for r in routes]
    return reference_problems(backends, pairs)


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: Any, path: str, missing: list[str]) -> Any:
    """Replace `${VAR}` (or `${VAR:-default}`) in every string of the tree."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is None:
                missing.append(f"{path}: environment variable {name} is not set")
            return default or ""

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: expand_env(v, f"{path}.{k}" if path else str(k), missing) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, f"{path}.{i}", missing) for i, v in enumerate(value)]
    return value


def _format(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        # Cross-reference checks already carry their own key paths.
        if e["type"] == "value_error" and re.match(r"^routes\.\d+\.", msg):
            lines.extend(msg.split("; "))
        else:
            lines.append(f"{loc}: {msg}")
    return lines


def parse_config(data: Any) -> Config:
    if not isinstance(data, dict):
        raise ConfigError(["(top level): must be a mapping"])
    missing: list[str] = []
    data = expand_env(data, "", missing)
    if missing:
        raise ConfigError(missing)
    try:
        config = Config.model_validate(data)
    except ValidationError as e:
        lines = _format(e)
        raise ConfigError(lines + [p for p in _raw_reference_problems(data) if p not in lines]) from None
    problems = check_options(config) + path_collisions(config)
    if problems:
        raise ConfigError(problems)
    return config


def check_options(config: Config) -> list[str]:
    """Each backend's `options` against its dialect's options model; routes that would let
    clients reach endpoints the operator did not list."""
    problems = []
    for name, b in config.backends.items():
        try:
            outbound = registry.get(b.dialect).outbound
            assert outbound is not None  # a backend's dialect has its outbound half (BackendDialect)
            outbound.options_model.model_validate(b.options)
        except ValidationError as e:
            for err in e.errors():
                loc = ".".join(str(p) for p in err["loc"])
                problems.append(f"backends.{name}.options.{loc}: {err['msg']}")
    for i, r in enumerate(config.routes):
        b = config.backends[r.backend]
        outbound = registry.get(b.dialect).outbound
        if outbound is not None and outbound.shared_credentials and not b.model and not r.models:
            problems.append(
                f"routes.{i}.models: backend {r.backend!r} ({b.dialect}) has no `model:`, so clients would pick "
                "any endpoint its credentials reach; list the models this route may call, or set the backend's model"
            )
    return problems


def route_paths(config: Config) -> dict[str, list[tuple[str, str]]]:
    """Route name -> mounted (method, full path) pairs."""
    out: dict[str, list[tuple[str, str]]] = {}
    for r in config.routes:
        inbound = registry.get(r.dialect).inbound
        out[r.name] = [(m.method, r.prefix + m.path) for m in (inbound.mounts if inbound is not None else ())]
    return out


def path_collisions(config: Config) -> list[str]:
    """Routes of different dialects that would mount the same method and path.

    Routes of the same dialect and prefix share their paths on purpose (they are told apart by
    the requested model), so only cross-dialect clashes are errors.
    """
    owner: dict[tuple[str, str], tuple[int, str, str]] = {}
    problems: list[str] = []
    paths = route_paths(config)
    reported: set[tuple[int, int]] = set()
    for i, r in enumerate(config.routes):
        for mp in paths[r.name]:
            if mp in owner:
                j, other, other_dialect = owner[mp]
                if other_dialect != r.dialect and (j, i) not in reported:
                    reported.add((j, i))
                    problems.append(
                        f"routes.{i}.prefix: route {r.name!r} ({r.dialect}) and route {other!r} "
                        f"({other_dialect}) both mount {mp[0]} {mp[1]}; give one of them a prefix"
                    )
            else:
                owner[mp] = (i, r.name, r.dialect)
    return problems
