"""The one place that imports orjson: every JSON read and write in the gateway goes through here."""

from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError
# Raised for what JSON cannot carry: nesting deeper than 254 levels, integers beyond 64 bits.
JSONEncodeError = orjson.JSONEncodeError


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    return orjson.loads(data)


def dumps_str(obj: Any) -> str:
    return orjson.dumps(obj).decode()
