"""How a dialect states its errors: one table from each kind of gateway error to the status its
clients get and the dialect's own word for it (OpenAI's `type`, TGI's `error_type`, Databricks'
`error_code`...). A status of None keeps the error's own (a backend's 5xx stays a 5xx)."""

from collections.abc import Callable, Mapping
from typing import Any

from gateway import jsonutil
from gateway.neutral.errors import GatewayError, Kind, body_text, clip

# Kind -> (status, or None for the error's own; the dialect's word for the kind)
ErrorTable = Mapping[Kind, tuple[int | None, str]]


def stated(table: ErrorTable, err: GatewayError) -> tuple[int, str]:
    """The status and word `table` gives `err`."""
    status, word = table[err.kind]
    return (err.status if status is None else status), word


def message_of(body: bytes, text: Callable[[Any], str]) -> str:
    """The human message of a backend's error body: `text` of it read as JSON (each dialect
    knows where its servers put the message), or the body itself as text (`body_text`)."""
    try:
        obj = jsonutil.loads(body)
    except jsonutil.JSONDecodeError:
        return body_text(body)
    return text(obj)


def error_message_in(obj: Any) -> str:
    """The message of an error object as most servers write it: `{"error": {"message": ...}}`,
    `{"error": "..."}` or `{"message": ...}`; else the object as text, `clip`ped."""
    if isinstance(obj, dict):
        err = obj.get("error") if obj.get("error") is not None else obj
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return clip(str(obj))
