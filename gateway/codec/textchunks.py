"""A stream's text chunks, read from a template instead of decoded one by one.

An upstream stream's text chunks differ only in their text: id, created, model, index and the
null fields are the stream's own. Once a parser has read one such chunk whole, `TextChunks`
keeps the bytes before and after its text string. A later event whose payload has exactly those
bytes around one JSON string is that text and nothing else, so it is read by decoding the string
alone, and a read made of such events (the usual read of a fast stream) is cut into its strings
with one split. Anything else (another field set, a finish, usage, other SSE framing) falls back
to the parser's full reading, which is the authority: the template only ever repeats what it said
of the chunk it was learned from.
"""

from gateway import jsonutil
from gateway.neutral.events import Event, TextDelta

_FRAMING = b"data: "
_new = tuple.__new__
# How often a stream's chunks may fail to show where their text sits before no more is tried (a
# server that escapes text otherwise than orjson: its chunks are read whole, as before).
_TRIES = 8


def _string(literal: bytes) -> str | None:
    """The text of `literal` when it is one JSON string, else None."""
    try:
        value = jsonutil.loads(literal)
    except jsonutil.JSONDecodeError:
        return None
    return value if type(value) is str else None


class TextChunks:
    """The template of one stream's text chunks: `key` is the text's field as it appears in the
    payload (`"content":`), whose string value is the text."""

    __slots__ = ("_index", "_key", "_lead", "_pre", "_suf", "_tries")

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._pre: bytes | None = None
        self._suf = b""
        self._lead = b""  # an event's first bytes: the framing and the payload's up to the text
        self._index = 0
        self._tries = _TRIES

    @property
    def learning(self) -> bool:
        return self._tries > 0

    @property
    def active(self) -> bool:
        """Known, or still to be learned."""
        return self._tries > 0 or self._pre is not None

    def learn(self, payload: bytes, text: str, index: int) -> None:
        """`payload` was read whole and is one choice's non-empty text and nothing else that
        varies: keep what surrounds its text, when the key and the text as orjson writes them
        are found in it exactly once (a key inside a string value has its quotes escaped, so
        it cannot be found there)."""
        found = self._key + jsonutil.dumps(text)
        at = payload.find(found)
        if at < 0 or payload.find(found, at + 1) >= 0:
            self._tries -= 1
            return
        cut = at + len(self._key)
        self._pre, self._suf, self._index = payload[:cut], payload[at + len(found) :], index
        self._lead = _FRAMING + self._pre

    def event(self, payload: bytes, out: list[Event]) -> bool:
        """Whether `payload` is a text chunk of the template; its text (when not empty) is
        appended to `out` if so."""
        pre = self._pre
        if pre is None or not payload.startswith(pre) or not payload.endswith(self._suf):
            return False
        # Between them one JSON string, or the chunk is something else (a second line, another
        # field, two strings): then it is read the full way.
        text = _string(payload[len(pre) : len(payload) - len(self._suf)])
        if text is None:
            return False
        if text:
            # The tuple made directly: a named tuple's own constructor costs as much again.
            out.append(_new(TextDelta, (text, self._index, None, None)))
        return True

    def run(self, data: bytes, start: int, out: list[Event]) -> int:
        """Where the text chunks of the template that `data` holds from `start` (where an event
        begins) end, each a whole event in the usual framing (`data: `, the payload, a blank
        line); their texts are appended to `out`. `start` when there are none. (`event`'s test
        with the framing in front, written out: this runs once per streamed token.)"""
        lead, suf = self._lead, self._suf
        if self._pre is None or not data.startswith(lead, start):
            return start  # not even the first: no need to cut the read
        begin, index = len(lead), self._index
        used = start
        # The last piece is what follows the last blank line: part of an event, or nothing.
        for event in data[start:].split(b"\n\n")[:-1]:
            if not event.startswith(lead) or not event.endswith(suf):
                break
            text = _string(event[begin : len(event) - len(suf)])
            if text is None:
                break
            if text:
                out.append(_new(TextDelta, (text, index, None, None)))
            used += len(event) + 2
        return used
