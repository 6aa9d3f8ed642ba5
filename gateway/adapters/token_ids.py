"""Token ids for clients whose dialect reports them (MindIE native, TGI) when the backend
sends text only: each piece of text is encoded with the backend's tokenizer.

Encoding a stream piece by piece can split differently from the model's own tokenization at
piece boundaries; the ids are the tokenizer's reading of the text the client received.
"""

from dataclasses import replace

from gateway.adapters.tokenizer import Tokenizer
from gateway.codec.capabilities import at_end
from gateway.codec.contract import EventStream
from gateway.neutral.events import Event, TextDelta, expand
from gateway.neutral.types import Result


class TokenIdStream:
    __slots__ = ("_inner", "_tok")

    def __init__(self, inner: EventStream, tokenizer: Tokenizer) -> None:
        self._inner = inner
        self._tok = tokenizer

    @property
    def ended(self) -> bool:
        return at_end(self._inner)

    async def next(self) -> list[Event] | None:
        events = await self._inner.next()
        if not events:
            return events
        return [
            ev._replace(token_ids=self._tok.encode(ev.text))
            if type(ev) is TextDelta and ev.token_ids is None and ev.text
            else ev
            for ev in expand(events)  # ids per token
        ]

    async def aclose(self) -> None:
        await self._inner.aclose()


def fill_token_ids(result: Result, tokenizer: Tokenizer, texts: bool = False) -> Result:
    """Each choice's token ids where the backend gave none; with `texts`, also each token's text
    (for a client that details every token) where the backend sent no per-token logprobs."""
    choices = []
    for c in result.choices:
        if c.token_ids is None and c.text:
            c = replace(c, token_ids=tokenizer.encode(c.text))
        # An id the tokenizer lacks (the backend's model is not the tokenizer's) has no text here.
        if (
            texts
            and c.token_ids
            and c.tokens is None
            and c.logprobs is None
            and tokenizer.unknown_id(c.token_ids) is None
        ):
            c = replace(c, tokens=[tokenizer.decode([i], skip_special_tokens=False) for i in c.token_ids])
        choices.append(c)
    return replace(result, choices=choices)
