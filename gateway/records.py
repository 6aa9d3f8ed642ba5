"""`record`: how the gateway declares an immutable record (a plan, a neutral request, a view a
codec is given).

A record is a frozen dataclass to the type checker, which refuses any assignment to a field
(`mypy --strict` runs over the package in the test suite), and a plain slotted dataclass at run
time. The reason is cost: a frozen dataclass sets each field through `object.__setattr__`, some
two thousand instructions a field, and the records built for one request (its neutral form and
messages, the plan, the upstream call, the result) came to about a tenth of what the gateway
spent on a whole JSON pass-through request (1.00 M instructions with frozen records, 0.90 M
without). Records hash by their fields, as frozen ones do.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform, overload

T = TypeVar("T")


@overload
def record(cls: type[T], /) -> type[T]: ...


@overload
def record(*, kw_only: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[T] | None = None, /, *, kw_only: bool = False) -> type[T] | Callable[[type[T]], type[T]]:
    """`@record` or `@record(kw_only=True)` on a class with annotated fields."""

    def make(c: type[T]) -> type[T]:
        return dataclass(slots=True, unsafe_hash=True, kw_only=kw_only)(c)

    return make if cls is None else make(cls)
