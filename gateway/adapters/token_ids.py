"""Token ids for clients whose dialect reports them (MindIE native, TGI) when the backend
sends text only: each piece of text is encoded with the backend's tokenizer.

Encoding a stream piece by piece can split differently from the model's own tokenization at
piece boundaries; the ids are the tokenizer's reading of the text the client received.
"""

from typing import TYPE_CHECKING

from gateway.adapters.tokenizer import Tokenizer
from gateway.core.types import Event, Result, TextDelta

if TYPE_CHECKING:
    from gateway.core.engine import EventStream


class TokenIdStream:
    __slots__ = ("_inner", "_tok")

    def __init__(self, inner: "EventStream", tokenizer: Tokenizer) -> None:
        self._inner = inner
        self._tok = tokenizer

    async def next(self) -> list[Event] | None:
        events = await self._inner.next()
        for ev in events or ():
            if type(ev) is TextDelta and ev.token_ids is None and ev.text:
                ev.token_ids = self._tok.encode(ev.text)
        return events

    async def aclose(self) -> None:
        await self._inner.aclose()


def fill_token_ids(result: Result, tokenizer: Tokenizer) -> Result:
    for c in result.choices:
        if c.token_ids is None and c.text:
            c.token_ids = tokenizer.encode(c.text)
    return result
