"""A dialect's wire model fields as the one declaration of its parameters, and what follows from them.

A schema marks each field that holds a neutral parameter with `Carries` in the field's `Annotated`
metadata, next to its type and range:

    typical_p: Annotated[float | None, Field(gt=0, le=1), Carries(VLLM)] = None

From the marks come the dialect's `WireNames`: `reading(model)` takes what clients send, by field
name; `writing(model, surface)` gives what one of the dialect's servers takes, by that server's
spelling, leaving out values outside the field's range where the mark asks for it. From the field
types and their pydantic constraints come the cheap checks of a fast path (`plain_checks`), and
from `Tensor` marks the input tensors of the model a Triton-style server describes. Everything is
derived once, when a dialect's module is imported; nothing here runs per request but the checks
and the ranges it returns.
"""

import functools
import math
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from gateway.codec.wirenames import WireNames

Check = Callable[[Any], bool]


class Carries:
    """The mark of a schema field that holds a neutral parameter."""

    __slots__ = ("in_range", "param", "read", "renamed", "surfaces", "wins")

    def __init__(
        self,
        *surfaces: str,
        param: str | None = None,
        wins: bool = False,
        read: bool = True,
        in_range: bool = False,
        **renamed: str,
    ) -> None:
        """`surfaces`: the dialect's server surfaces whose bodies carry the field under its own
        name; `renamed`: surface=wire name for a surface that carries it under another (none of
        either: clients send it, the dialect's servers never get it). `param`: the neutral
        parameter, when it is not the field's name. `wins`: over other fields of the same
        parameter, when a body sets both, and it is the one written. `read`: False when the
        dialect's inbound code reads the value itself (only some values count, or it becomes
        something else). `in_range`: when writing, a value outside the field's bounds is left out
        (the server refuses it, and at those edges the value means "off" in other dialects)."""
        self.surfaces = frozenset(surfaces) | frozenset(renamed)
        self.renamed = renamed
        self.param = param
        self.wins = wins
        self.read = read
        self.in_range = in_range


class Tensor:
    """The mark of a field that is an input tensor of the model a Triton-style server describes;
    `datatype` (a KServe name) when the field's type does not give the right one."""

    __slots__ = ("datatype",)

    def __init__(self, datatype: str | None = None) -> None:
        self.datatype = datatype


def _marks(model: type[BaseModel], kind: type[Any]) -> Iterator[tuple[str, FieldInfo, Any]]:
    for name, field in model.model_fields.items():
        for mark in field.metadata:
            if isinstance(mark, kind):
                yield name, field, mark


def _carried(model: type[BaseModel]) -> list[tuple[str, FieldInfo, Carries]]:
    """The marked fields, those that win over others of their parameter first."""
    return sorted(_marks(model, Carries), key=lambda m: not m[2].wins)


@functools.cache
def reading(model: type[BaseModel]) -> WireNames:
    """What clients send: each marked field the dialect reads by name, as its neutral parameter."""
    return WireNames([(name, mark.param or name) for name, _, mark in _carried(model) if mark.read])


@functools.cache
def writing(model: type[BaseModel], surface: str) -> WireNames:
    """What `surface` takes: each field marked for it, under the surface's name for it."""
    pairs: list[tuple[str, str]] = []
    ranges: dict[str, tuple[float, float]] = {}
    for name, field, mark in _carried(model):
        if surface in mark.surfaces:
            wire = mark.renamed.get(surface, name)
            pairs.append((wire, mark.param or name))
            if mark.in_range:
                ranges[wire] = _within(field)
    return WireNames(pairs, ranges)


# ---- values judged by a field's type and bounds --------------------------------------------------

_NUMBERS: dict[type, tuple[type, ...]] = {int: (int,), float: (int, float)}  # strict floats take ints
_KNOWN = (Ge, Gt, Le, Lt, MinLen, MaxLen, Carries, Tensor)


def _constraints(extras: Iterable[Any]) -> list[Any]:
    """The metadata of an `Annotated`, with pydantic's `Field(...)` opened to its constraints."""
    out: list[Any] = []
    for item in extras:
        out.extend(item.metadata if isinstance(item, FieldInfo) else [item])
    return out


def _bounds(meta: Iterable[Any], integral: bool) -> tuple[float, float]:
    """The closed interval [lo, hi] the numeric bounds allow (an open end moved inward by the
    least step of the type, so `lo <= v <= hi` holds exactly when the bounds do)."""
    lo, hi = -math.inf, math.inf
    for m in meta:
        if isinstance(m, Ge | Gt):
            bound: Any = m.ge if isinstance(m, Ge) else _inward(m.gt, math.inf, integral)
            lo = max(lo, bound)
        elif isinstance(m, Le | Lt):
            bound = m.le if isinstance(m, Le) else _inward(m.lt, -math.inf, integral)
            hi = min(hi, bound)
    return lo, hi


def _inward(bound: Any, towards: float, integral: bool) -> float:
    if integral and isinstance(bound, int):
        return bound + (1 if towards > 0 else -1)
    return math.nextafter(bound, towards)


def _lengths(meta: Iterable[Any]) -> tuple[int, float]:
    lo, hi = 0, math.inf
    for m in meta:
        if isinstance(m, MinLen):
            lo = max(lo, m.min_length)
        elif isinstance(m, MaxLen):
            hi = min(hi, m.max_length)
    return lo, hi


def _within(field: FieldInfo) -> tuple[float, float]:
    """The closed interval of the numbers the field takes."""
    lo, hi = _bounds(field.metadata, _scalar(field.annotation) is int)
    if lo == -math.inf and hi == math.inf:
        raise ValueError("a field marked in_range needs bounds")
    return lo, hi


def _scalar(tp: Any) -> Any:
    """The one non-null member of an optional type, else the type."""
    members = [a for a in get_args(tp) if a is not types.NoneType] if _is_union(tp) else [tp]
    return members[0] if len(members) == 1 else None


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _value_check(tp: Any, meta: list[Any], nullable: bool = False) -> Check | None:
    """A check that holds only for values a strict pydantic field of type `tp` with constraints
    `meta` takes as they are; None when the type is not one judged this way."""
    if any(not isinstance(m, _KNOWN) for m in meta):
        return None  # a pattern, a strictness switch...: left to the model
    if get_origin(tp) is Annotated:
        base, *extras = get_args(tp)
        return _value_check(base, [*meta, *_constraints(extras)], nullable)
    if _is_union(tp):
        members = get_args(tp)
        rest = [m for m in members if m is not types.NoneType]
        nullable = nullable or len(rest) < len(members)
        if len(rest) == 1:
            return _value_check(rest[0], meta, nullable)
        if any(isinstance(m, (Ge, Gt, Le, Lt, MinLen, MaxLen)) for m in meta):
            return None
        checks = [_value_check(m, [], False) for m in rest]
        if any(c is None for c in checks):
            return None
        return _either(nullable, [c for c in checks if c is not None])
    if tp in _NUMBERS:
        return _number(_NUMBERS[tp], nullable, *_bounds(meta, tp is int))
    if tp is bool:
        return (lambda v: v is None or type(v) is bool) if nullable else (lambda v: type(v) is bool)
    origin = get_origin(tp)
    if tp is str or (origin is dict and get_args(tp) == (str, Any)):
        return _container(str if tp is str else dict, None, nullable, *_lengths(meta))
    if origin is list:
        item = _value_check(get_args(tp)[0], [], False)
        return None if item is None else _container(list, item, nullable, *_lengths(meta))
    return None  # a nested model, a literal, a dict of typed values...: left to the model


def _either(nullable: bool, checks: list[Check]) -> Check:
    if len(checks) == 2:  # the usual case (a string or a list of them), without a loop
        a, b = checks
        return (lambda v: v is None or a(v) or b(v)) if nullable else (lambda v: a(v) or b(v))

    def one_of(v: Any) -> bool:
        return any(c(v) for c in checks)

    return (lambda v: v is None or one_of(v)) if nullable else one_of


def _number(kinds: tuple[type, ...], nullable: bool, lo: float, hi: float) -> Check:
    if lo == -math.inf and hi == math.inf:
        if nullable:
            return lambda v: v is None or type(v) in kinds
        return lambda v: type(v) in kinds
    if nullable:
        return lambda v: v is None or (type(v) in kinds and lo <= v <= hi)
    return lambda v: type(v) in kinds and lo <= v <= hi


def _container(kind: type[Any], item: Check | None, nullable: bool, lo: int, hi: float) -> Check:
    def check(v: Any) -> bool:
        return type(v) is kind and lo <= len(v) <= hi and (item is None or all(map(item, v)))

    if item is None and lo == 0 and hi == math.inf:
        return (lambda v: v is None or type(v) is kind) if nullable else (lambda v: type(v) is kind)
    return (lambda v: v is None or check(v)) if nullable else check


def plain_checks(
    model: type[BaseModel], *, skip: Iterable[str] = (), own: Mapping[str, Check] | None = None
) -> dict[str, Check]:
    """Field name -> a cheap check that holds only for values the (strict) model takes as they
    are, for each field whose type and bounds say it all; `own` holds checks for fields whose type
    is not simple. Fields with a validator of their own, or an alias, get none: the model judges
    them. A rule between fields (a model validator) is not seen here: the caller checks it."""
    judged = {f for d in model.__pydantic_decorators__.field_validators.values() for f in d.info.fields}
    own = own or {}
    out: dict[str, Check] = {}
    for name, field in model.model_fields.items():
        if name in skip or name in judged or field.alias or field.validation_alias:
            continue
        check = own.get(name) or _value_check(field.annotation, list(field.metadata))
        if check is not None:
            out[name] = check
    return out


class PlainJudge:
    """Whether a request body is one its (strict) model takes as it is, judged by cheap checks
    (`plain_checks`) instead of the model: every field the model requires is there, each checked
    field's value passes its check, and every other field the model declares (`skip` aside, which
    the caller judges) is absent or null. False means "ask the model", not "invalid"."""

    __slots__ = ("checks", "declared", "required")

    def __init__(self, model: type[BaseModel], *, skip: Iterable[str] = (), own: Mapping[str, Check] | None = None):
        skipped = frozenset(skip)
        self.checks = plain_checks(model, skip=skipped, own=own)
        self.declared = frozenset(model.model_fields) - skipped
        self.required = tuple(name for name in self.declared if model.model_fields[name].is_required())

    def __call__(self, data: Mapping[str, Any]) -> bool:
        for name in self.required:
            if name not in data:
                return False
        checks, declared = self.checks, self.declared
        for key, value in data.items():
            check = checks.get(key)
            if check is not None:
                if not check(value):
                    return False
            elif value is not None and key in declared:
                return False  # a declared field judged only by the model
        return True


# ---- tensors -----------------------------------------------------------------------------------

_DATATYPES: dict[Any, str] = {bool: "BOOL", int: "INT32", float: "FP32", str: "BYTES"}
TensorRow = tuple[str, str, str, int]


def tensor_inputs(model: type[BaseModel], named_for: str) -> tuple[TensorRow, ...]:
    """(name, KServe datatype, model-configuration data type, dims) of each field marked `Tensor`:
    named as surface `named_for` spells it, typed by its Python type unless the mark says (a list
    of values is a tensor of dynamic length)."""
    rows: list[TensorRow] = []
    for name, field, mark in _marks(model, Tensor):
        carries = next((m for m in field.metadata if isinstance(m, Carries)), None)
        wire = carries.renamed.get(named_for, name) if carries else name
        members = [a for a in get_args(field.annotation) if a is not types.NoneType] or [field.annotation]
        lists = [get_args(m)[0] for m in members if get_origin(m) is list]
        element = lists[0] if lists else members[0]
        datatype = mark.datatype or _DATATYPES[element]
        config = "TYPE_STRING" if datatype == "BYTES" else "TYPE_" + datatype
        rows.append((wire, datatype, config, -1 if lists else 1))
    return tuple(rows)
