"""What the gateway keeps of a response (for `previous_response_id`, retrieval, its input items):
the response object as its client got it, and the input it answered, which is the whole
conversation up to it (the input of the responses it continued, and their output, included).

Entries live in the caller's own part of the gateway's state store (codec.contract.StateStore),
under the response's id. Keeping never fails a request: its client already has the answer.
"""

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from gateway import jsonutil
from gateway.codec.contract import Caller
from gateway.neutral.types import Request
from gateway.records import record

log = logging.getLogger("gateway")
_KEY = "response:"


@record
class Kept:
    response: dict[str, Any]
    input: list[dict[str, Any]]

    def context(self) -> list[dict[str, Any]]:
        """The conversation a response that continues this one starts from."""
        output = self.response.get("output")
        return [*self.input, *(output if isinstance(output, list) else ())]


async def load(caller: Caller, response_id: str) -> Kept | None:
    data = await caller.store.get(caller.owner, _KEY + response_id)
    if data is None:
        return None
    try:
        obj = jsonutil.loads(data)
        return Kept(obj["response"], obj["input"])
    except (jsonutil.JSONDecodeError, KeyError, TypeError):
        log.warning("request %s: a kept response (%s) does not read; taken as unknown", caller.request_id, response_id)
        return None


def wanted(raw: Mapping[str, Any] | None) -> bool:
    """Whether a create body asks for its response to be kept (`store` is true unless said)."""
    return raw is not None and raw.get("store") is not False


async def save(caller: Caller, response: Mapping[str, Any], items: list[dict[str, Any]]) -> None:
    rid = response.get("id")
    if not isinstance(rid, str):
        return
    try:
        await caller.store.put(caller.owner, _KEY + rid, jsonutil.dumps({"response": response, "input": items}))
    except Exception:
        log.exception("request %s: the response %s could not be kept", caller.request_id, rid)


async def remove(caller: Caller, response_id: str) -> bool:
    return await caller.store.delete(caller.owner, _KEY + response_id)


def input_items(value: str | Sequence[Any] | None) -> list[dict[str, Any]]:
    """The `input` of a create body as a list of items (a string is one user message)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return [dict(item) for item in value if isinstance(item, dict)]


def input_of(req: Request) -> list[dict[str, Any]]:
    """The input a response answered, as it is kept: the whole conversation's items."""
    return input_items((req.raw or {}).get("input"))
