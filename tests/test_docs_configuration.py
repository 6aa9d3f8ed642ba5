"""Every key of the configuration is documented: each key path of the config's models (nested
models, each backend's and route's keys, and each backend dialect's `options`) appears in
docs/configuration.md, so a key added without its documentation fails here."""

import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from gateway.config import Config
from gateway.dialects import registry

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def _models(annotation: Any) -> list[tuple[str, type[BaseModel]]]:
    """The models a field's type holds, each with the step its keys sit under: "" for the model
    itself (or an optional one), ".NAME" for a mapping's values, "[]" for a list's items."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return [found for arg in args for found in _models(arg)]
    if origin is dict and len(args) == 2:
        return [(".NAME" + step, model) for step, model in _models(args[1])]
    if origin is list and args:
        return [("[]" + step, model) for step, model in _models(args[0])]
    return []


def key_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key path under `model`, written as docs/configuration.md writes them."""
    paths: list[str] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        paths.append(path)
        for step, inner in _models(field.annotation):
            paths += key_paths(inner, path + step)
    return paths


def option_paths() -> list[str]:
    """Each backend dialect's `options`, under any backend."""
    paths: list[str] = []
    for name in registry.outbound_names():
        outbound = registry.get(name).outbound
        assert outbound is not None
        paths += key_paths(outbound.options_model, "backends.NAME.options")
    return paths


def test_the_walk_finds_nested_keys_mapped_and_listed_ones():
    paths = key_paths(Config)
    assert {"listen.tls.client_ca", "backends.NAME.tls.verify", "routes[].prefix", "limits.max_body_bytes"} <= set(
        paths
    )
    assert "backends.NAME.options.flavor" in option_paths()


def test_every_key_of_the_configuration_is_in_its_docs():
    doc = DOC.read_text()
    missing = [p for p in key_paths(Config) + option_paths() if f"`{p}`" not in doc]
    assert missing == [], f"keys not in docs/configuration.md (as `key.path`): {missing}"
