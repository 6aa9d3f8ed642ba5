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


def dumps_str(obj: Any) -> str:
    return orjson.dumps(obj).decode()
