"""The one place that imports orjson: every JSON read and write in the gateway goes through here."""

from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    return orjson.loads(data)


def dumps_str(obj: Any) -> str:
    return orjson.dumps(obj).decode()
