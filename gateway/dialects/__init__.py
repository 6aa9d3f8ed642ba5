"""Registry of dialects: name -> inbound and outbound codecs, loaded on first use."""

import importlib
import importlib.util
from typing import TYPE_CHECKING

from gateway.dialects.base import Dialect

if TYPE_CHECKING:
    from gateway.config import Config

# Each module exposes `DIALECT: Dialect`. A name missing here is not built yet.
_MODULES = {
    "openai": "gateway.dialects.openai",
    "mindie": "gateway.dialects.mindie",
    "tgi": "gateway.dialects.tgi",
    "triton": "gateway.dialects.triton",
    "databricks": "gateway.dialects.databricks",
}
_loaded: dict[str, Dialect] = {}


def available() -> list[str]:
    return [n for n in _MODULES if importlib.util.find_spec(_MODULES[n]) is not None]


def get(name: str) -> Dialect:
    d = _loaded.get(name)
    if d is None:
        if name not in _MODULES or importlib.util.find_spec(_MODULES[name]) is None:
            raise KeyError(name)
        d = importlib.import_module(_MODULES[name]).DIALECT
        _loaded[name] = d
    return d


def check_options(config: "Config") -> list[str]:
    """Validate each backend's `options` against its dialect's options model."""
    from pydantic import ValidationError

    problems = []
    for name, b in config.backends.items():
        try:
            dialect = get(b.dialect)
        except KeyError:
            problems.append(f"backends.{name}.dialect: dialect {b.dialect!r} is not available in this build")
            continue
        try:
            dialect.outbound.options_model.model_validate(b.options)
        except ValidationError as e:
            for err in e.errors():
                loc = ".".join(str(p) for p in err["loc"])
                problems.append(f"backends.{name}.options.{loc}: {err['msg']}")
    for i, r in enumerate(config.routes):
        try:
            get(r.dialect)
        except KeyError:
            problems.append(f"routes.{i}.dialect: dialect {r.dialect!r} is not available in this build")
        b = config.backends[r.backend]
        try:
            shared = get(b.dialect).outbound.shared_credentials
        except KeyError:
            continue
        if shared and not b.model and not r.models:
            problems.append(
                f"routes.{i}.models: backend {r.backend!r} ({b.dialect}) has no `model:`, so clients would pick "
                "any endpoint its credentials reach; list the models this route may call, or set the backend's model"
            )
    return problems


def route_paths(config: "Config") -> dict[str, list[tuple[str, str]]]:
    """Route name -> mounted (method, full path) pairs."""
    out: dict[str, list[tuple[str, str]]] = {}
    for r in config.routes:
        try:
            paths = get(r.dialect).inbound.paths()
        except KeyError:
            paths = []
        out[r.name] = [(m, r.prefix + p) for m, p in paths]
    return out


def path_collisions(config: "Config") -> list[str]:
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
