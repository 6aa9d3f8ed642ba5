"""The one place that imports orjson: every JSON read and write in the gateway goes through here."""

from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError
# Raised for what JSON cannot carry: nesting deeper than 254 levels, integers beyond 64 bits.
JSONEncodeError = orjson.JSONEncodeError


# orjson's own functions, not wrappers: a Python call in between costs as much as the encoding
# of a token's text, and renderers encode one per streamed token.
dumps = orjson.dumps
loads = orjson.loads


def _cuttable(texts: list[str]) -> bytes | None:
    """The texts encoded as one JSON list, when every `","` in it lies between two texts (how
    a renderer encodes a run of tokens in one call); else None. Without an escaped quote every
    quote in the list begins or ends a text, so a `","` is a boundary, or a text that is one
    comma."""
    encoded = orjson.dumps(texts)
    return None if b'\\"' in encoded or "," in texts else encoded


def strings_joined(texts: list[str], between: bytes) -> bytes:
    """`between.join` of the texts, each as a JSON string (a run of tokens, one frame each)."""
    encoded = _cuttable(texts)
    if encoded is None:
        return between.join(map(orjson.dumps, texts))
    return encoded[1:-1].replace(b'","', b'"' + between + b'"')


def string_contents(texts: list[str]) -> list[bytes] | None:
    """Each text's JSON string without its quotes (for frames that differ in more than their
    texts); None where one encoding of the list cannot be cut exactly."""
    encoded = _cuttable(texts) if texts else None
    return None if encoded is None else encoded[2:-2].split(b'","')


def numbers(values: list[int]) -> list[bytes]:
    """Each integer as JSON writes it, encoded in one call (a run of tokens' ids)."""
    return orjson.dumps(values)[1:-1].split(b",") if values else []


# The counting numbers as JSON writes them, made as far as a stream has counted (a position or a
# sequence number a streamed token, so a few thousand at most: a kilobyte or two a hundred).
_COUNTED: list[bytes] = []
_COUNTED_MOST = 1 << 14


def counted(first: int, stop: int) -> list[bytes]:
    """`numbers` of the integers from `first` up to `stop` (a run of tokens' positions)."""
    if first < 0 or stop > _COUNTED_MOST:
        return numbers(list(range(first, stop)))
    if stop > len(_COUNTED):
        _COUNTED.extend(numbers(list(range(len(_COUNTED), stop + 256))))
    return _COUNTED[first:stop]


def dumps_str(obj: Any) -> str:
    return orjson.dumps(obj).decode()
