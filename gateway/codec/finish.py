"""Reading a wire's finish words into the neutral `Finish`: each dialect declares its words."""

from collections.abc import Mapping

from gateway.neutral.types import Finish


class FinishWords:
    """One wire's finish vocabulary, read into canonical reasons."""

    __slots__ = ("_words",)

    def __init__(self, words: Mapping[str, Finish]) -> None:
        self._words = dict(words)

    def __or__(self, other: "FinishWords") -> "FinishWords":
        """Both vocabularies (a server that mixes two families' words on one route)."""
        return FinishWords({**self._words, **other._words})

    def read(self, value: object) -> Finish | None:
        """None for "not finished" (null, an empty string, or vLLM's "None"); UNKNOWN for a word
        the wire does not have."""
        if value is None or value == "None" or value == "":
            return None
        if not isinstance(value, str):
            return Finish.UNKNOWN
        return self._words.get(value, Finish.UNKNOWN)
