"""How one wire surface names the neutral parameters, in both directions, as data.

A dialect has one `WireNames` per place its wire holds parameters (OpenAI's body, TGI's
`parameters` object, each Triton backend's input names), derived from its schema's marked fields
(gateway.codec.fields): which wire field is which neutral parameter. Reading takes the fields a
client set into neutral values; writing gives the wire fields for the parameters a request
carries. What a backend carries is what its names write: the fate policy reads it from here, so
the two cannot disagree.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from gateway.neutral.params import NAMES, Fate, Params


class WireNames:
    __slots__ = ("_in", "_out", "_plain", "_ranged")

    def __init__(
        self, pairs: Iterable[tuple[str, str]], ranges: Mapping[str, tuple[float, float]] | None = None
    ) -> None:
        """`pairs` of (wire name, neutral name). Several wire names may read as one neutral
        parameter (aliases): the first of them is the one written, and wins when a body holds
        more than one. `ranges`: wire name -> the closed interval of the values the surface takes;
        a value outside is left out when writing."""
        self._in: dict[str, tuple[str, int]] = {}
        self._out: dict[str, str] = {}
        for rank, (wire, name) in enumerate(pairs):
            if name not in NAMES:
                raise ValueError(f"{name!r} is not a neutral parameter")
            self._in[wire] = (name, rank)
            self._out.setdefault(name, wire)
        # Written in two passes, each without a test the other needs: the values written as they
        # are, then those held to a range.
        ranges = ranges or {}
        self._plain = tuple((name, wire) for name, wire in self._out.items() if wire not in ranges)
        self._ranged = tuple((name, wire, *ranges[wire]) for name, wire in self._out.items() if wire in ranges)

    @property
    def carried(self) -> frozenset[str]:
        """The neutral parameters this surface holds."""
        return frozenset(self._out)

    def fields(self, names: Iterable[str]) -> frozenset[str]:
        """The wire fields (aliases included) that hold these neutral parameters."""
        wanted = frozenset(names)
        return frozenset(wire for wire, (name, _rank) in self._in.items() if name in wanted)

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
        """Wire fields for the parameters set, in this surface's order, but values out of range."""
        out: dict[str, Any] = {}
        for name, wire in self._plain:
            value = getattr(params, name)
            if value is not None:
                out[wire] = list(value) if isinstance(value, tuple) else value
        for name, wire, lo, hi in self._ranged:
            value = getattr(params, name)
            if value is not None and lo <= value <= hi:
                out[wire] = value
        return out


def neutral_value(value: Any) -> Any:
    """Lists become tuples, so a neutral value cannot change under the request that holds it."""
    return tuple(value) if isinstance(value, list) else value
