"""How one wire surface names the neutral parameters, in both directions, as data.

A dialect declares one `WireNames` per place its wire holds parameters (OpenAI's body, TGI's
`parameters` object, each Triton backend's input names): which wire field is which neutral
parameter. Reading takes the fields a client set into neutral values; writing gives the wire
fields for the parameters a request carries. What a backend carries is what its names write:
the fate policy reads it from here, so the two cannot disagree.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from gateway.neutral.params import NAMES, Fate, Params


class WireNames:
    __slots__ = ("_in", "_out")

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        """`pairs` of (wire name, neutral name). Several wire names may read as one neutral
        parameter (aliases): the first of them is the one written, and wins when a body holds
        more than one."""
        self._in: dict[str, tuple[str, int]] = {}
        self._out: dict[str, str] = {}
        for rank, (wire, name) in enumerate(pairs):
            if name not in NAMES:
                raise ValueError(f"{name!r} is not a neutral parameter")
            self._in[wire] = (name, rank)
            self._out.setdefault(name, wire)

    @classmethod
    def of(cls, *same: str, **renamed: str) -> "WireNames":
        """`same`: spelled on the wire as in the neutral form; `renamed`: wire_name=neutral_name."""
        return cls([(n, n) for n in same] + list(renamed.items()))

    def _pairs(self) -> list[tuple[str, str]]:
        return [(wire, name) for wire, (name, _rank) in self._in.items()]

    def plus(self, *same: str, **renamed: str) -> "WireNames":
        """These names and some more."""
        return WireNames([*self._pairs(), *((n, n) for n in same), *renamed.items()])

    def without(self, *names: str) -> "WireNames":
        """These names but the given neutral parameters."""
        return WireNames([(w, n) for w, n in self._pairs() if n not in names])

    @property
    def carried(self) -> frozenset[str]:
        """The neutral parameters this surface holds."""
        return frozenset(self._out)

    def fates(self, **others: Fate) -> dict[str, Fate]:
        """MAP for every parameter carried, plus the fates given for others (EMULATE mostly)."""
        return {**dict.fromkeys(self._out, Fate.MAP), **others}

    def read(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """Neutral values of the wire fields the client set (null is "not set"). The body's own
        fields are walked, not every name: a body sets few of them."""
        out: dict[str, Any] = {}
        ranks: dict[str, int] = {}
        names = self._in
        for wire, value in data.items():
            hit = names.get(wire)
            if hit is None or value is None:
                continue
            name, rank = hit
            if name in ranks and ranks[name] < rank:
                continue  # an alias of higher precedence is set too
            out[name] = neutral_value(value)
            ranks[name] = rank
        return out

    def write(self, params: Params) -> dict[str, Any]:
        """Wire fields for the parameters set, in this surface's order."""
        out: dict[str, Any] = {}
        for name, wire in self._out.items():
            value = getattr(params, name)
            if value is not None:
                out[wire] = list(value) if isinstance(value, tuple) else value
        return out


def neutral_value(value: Any) -> Any:
    """Lists become tuples, so a neutral value cannot change under the request that holds it."""
    return tuple(value) if isinstance(value, list) else value
