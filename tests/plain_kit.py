"""Holding a dialect's quick judge of request bodies (plain_chat, plain_request) against the
pydantic model it stands in for: it never passes a body the model refuses, and what the gateway
reads of a body does not depend on which of the two judged it."""

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from gateway import jsonutil


def accepted(model: type[BaseModel], data: dict[str, Any]) -> bool:
    try:
        model.model_validate(data)
    except ValidationError:
        return False
    return True


def judged(
    bodies: Iterable[dict[str, Any]], judge: Callable[[dict[str, Any]], bool], model: type[BaseModel]
) -> tuple[int, int]:
    """How many of `bodies` the judge passed and how many the model refused (a failure at the
    first the judge passed and the model refuses)."""
    passed = refused = 0
    for data in bodies:
        ok = accepted(model, data)
        if judge(data):
            passed += 1
            assert ok, f"the quick judge passed a body the model refuses: {data!r}"
        elif not ok:
            refused += 1
    return passed, refused


def field_by_field(
    field: str,
    values: Iterable[Any],
    base: dict[str, Any],
    judge: Callable[[dict[str, Any]], bool],
    model: type[BaseModel],
) -> None:
    """`base` with `field` set to each of `values`: the judge passes some, none the model refuses."""
    passed = 0
    for value in values:
        data = {**base, field: value}
        if judge(data):
            passed += 1
            assert accepted(model, data), f"the quick judge passed {field}={value!r}, the model refuses it"
    assert passed, f"no value of {field} was judged plain"


def read_alike(
    bodies: Iterable[dict[str, Any]],
    parse: Callable[[bytes], Any],
    module: ModuleType,
    judge: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each body, judged plain by `module`'s `judge`, parses to the same request when the judge
    is made to say no (and the model is built)."""
    for data in bodies:
        body = jsonutil.dumps(data)
        assert getattr(module, judge)(jsonutil.loads(body)), data
        quick = parse(body)
        with monkeypatch.context() as m:
            m.setattr(module, judge, lambda _: False)
            built = parse(body)
        assert quick == built
