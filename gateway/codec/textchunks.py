"""A stream's text chunks, read from a template instead of decoded one by one.

An upstream stream's text chunks differ only in their text: id, created, model, index and the
null fields are the stream's own. Once a parser has read one such chunk whole, `TextChunks`
keeps the bytes before and after its text string. A later event whose payload has exactly those
bytes around one JSON string is that text and nothing else, so it is read by decoding the string
alone, and a read made of such events (the usual read of a fast stream) is cut at its blank
lines and its strings decoded together, as one JSON array, their texts going on as one
TextRun. Anything else (another field set, a finish, usage, other SSE framing, a second line)
falls back to the parser's full reading, which is the authority: the template only ever repeats
what it said of the chunk it was learned from.

A run of such events is taken apart in a few passes over the whole read (its lines, the bytes
between the template's, its holes) and then put back together from the pieces and the
template's bytes: when that gives the read back byte for byte, every event was the template's,
and the pieces are its texts and holes. Anything else is cut event by event.

Some servers' text chunks also carry numbers that change from one chunk to the next (TRT-LLM's
log probabilities, which count its tokens). A template made with `counted` keeps those before
the text as holes: the field under `counted`, and every value with a fraction, an exponent or
brackets (a log probability or a list of them; whole numbers such as ids are the stream's own
and stay in the template). The bytes between the holes must be the learned ones and each hole
one JSON value; `count` of the counted values adds up in `tokens`.
"""

import re
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from gateway import jsonutil
from gateway.neutral.events import Event, TextDelta, TextRun, new_event

_FRAMING = b"data: "
# How often a stream's chunks may fail to show where their text sits before no more is tried (a
# server that escapes text otherwise than orjson: its chunks are read whole, as before).
_TRIES = 8
# A field's value that is a number or a flat list of numbers.
_NUMBER = re.compile(rb'":\s*(-?[0-9][0-9.eE+-]*|\[[0-9.eE+\-,\s]*\])(?=\s*[,}])')
_STR = {str}


class TextChunks:
    """The template of one stream's text chunks: `key` is the text's field as it appears in the
    payload (`"content":`), whose string value is the text; `counted` (`"output_log_probs":`)
    a field that counts each chunk's tokens, and `count` how many a list of its values holds."""

    __slots__ = (
        "_at",
        "_count",
        "_counted",
        "_index",
        "_key",
        "_lead",
        "_middle",
        "_per",
        "_pre",
        "_refused",
        "_segs",
        "_seps",
        "_suf",
        "_tail",
        "_tries",
        "tokens",
    )

    def __init__(self, key: bytes, counted: bytes | None = None, count: Callable[[Any], int] = len) -> None:
        self._key = key
        self._counted = counted
        self._count = count
        self._pre: bytes | None = None
        self._suf = b""
        self._lead = b""  # an event's first bytes: the framing and the payload's up to the text
        # With holes: the bytes after each hole, up to the next or the text (the last ends with
        # the key); and how many values a chunk decodes to (its holes and its text).
        self._segs: tuple[bytes, ...] = ()
        self._per = 1
        # For a run of events: where each ends (the bytes after the text and the blank line),
        # the slice of an event's line between the template's bytes, and the bytes that follow
        # each hole and text of a run put back together (the last: to the next event's holes).
        self._tail = b""
        self._middle = slice(0)
        self._seps: tuple[bytes, ...] = ()
        self._at = 0  # which hole is the counted value
        self._refused: bytes | None = None  # the last read whose run `_whole` could not prove
        self._index = 0
        self._tries = _TRIES
        self.tokens = 0  # counted by the chunks read from the template

    @property
    def learning(self) -> bool:
        return self._tries > 0

    @property
    def active(self) -> bool:
        """Known, or still to be learned."""
        return self._tries > 0 or self._pre is not None

    def learn(self, payload: bytes, text: str, index: int) -> None:
        """`payload` was read whole and is one choice's non-empty text and nothing else that
        varies (but the numbers a `counted` template takes as holes): keep what surrounds its
        text, when the key and the text as orjson writes them are found in it exactly once (a
        key inside a string value has its quotes escaped, so it cannot be found there)."""
        found = self._key + jsonutil.dumps(text)
        at = payload.find(found)
        # A payload of several lines (an event of several `data:` lines) teaches no template: on
        # the wire each of its lines has a `data:` of its own, which the template would lack.
        if at < 0 or payload.find(found, at + 1) >= 0 or b"\n" in payload:
            self._tries -= 1
            return
        pre, segs = payload[: at + len(self._key)], tuple[bytes, ...]()
        if self._counted is not None:
            numbers = list(_NUMBER.finditer(pre))
            counted = [m for m in numbers if pre[: m.start(1)].rstrip().endswith(self._counted)]
            if not counted:  # the template is only of chunks that count their tokens
                self._tries -= 1
                return
            # Holes: the counted value, and the numbers with a fraction or exponent, or lists.
            holes = [m for m in numbers if m is counted[0] or m[1].strip(b"-0123456789")]
            self._at = holes.index(counted[0])
            ends = [m.start(1) for m in holes[1:]] + [len(pre)]
            segs = tuple(pre[m.end(1) : end] for m, end in zip(holes, ends, strict=True))
            pre = pre[: holes[0].start(1)]
        self._pre, self._segs, self._per = pre, segs, len(segs) + 1
        self._suf, self._index = payload[at + len(found) :], index
        self._lead = _FRAMING + pre
        self._tail = self._suf + b"\n\n"
        self._middle = slice(len(self._lead), -len(self._suf) or None)
        self._seps = (*segs, self._tail + self._lead)

    def _parts(self, payload: bytes, at: int, parts: list[bytes]) -> bool:
        """Put the holes and the text literal of `payload` (which starts as the template does,
        its first hole at `at`, and ends as it does) in `parts`; False when the bytes between
        the holes are not the template's."""
        before = len(parts)
        for seg in self._segs:
            end = payload.find(seg, at)
            if end < 0:
                del parts[before:]
                return False
            parts.append(payload[at:end])
            at = end + len(seg)
        parts.append(payload[at : len(payload) - len(self._suf)])
        return True

    def _decode(self, parts: list[bytes], out: list[Event]) -> bool:
        """The chunks whose holes and literals `parts` holds, in order, into `out`: True, or
        False (with nothing added) unless every hole decodes as one JSON value and every
        literal as one string (one part that holds two values, or a literal that is not one
        string, and the chunk is something else, read the full way)."""
        body = b",".join(parts)
        if b"\n" in body or b"\r" in body:
            # A part of more than one line (or event) is no part of the template: a CR ends a
            # line too, where JSON would take it for white space.
            return False
        try:
            if len(parts) == 1:
                # One chunk of a template without holes (a model server's event a read): its
                # literal alone, no list around it.
                text = jsonutil.loads(body)
                if type(text) is not str:
                    return False
                if text:
                    out.append(new_event(TextDelta, (text, self._index, None, None)))
                return True
            values = jsonutil.loads(b"[" + body + b"]")
        except jsonutil.JSONDecodeError:
            return False
        if len(values) != len(parts):
            return False
        per = self._per
        texts = values[per - 1 :: per] if per > 1 else values
        if set(map(type, texts)) != _STR:
            return False
        texts = list(filter(None, texts))  # an empty text is no token of its own
        if len(texts) > 1:
            out.append(new_event(TextRun, (texts, self._index)))
        elif texts:
            out.append(new_event(TextDelta, (texts[0], self._index, None, None)))
        if per > 1:
            self.tokens += self._count(values[self._at :: per])
        return True

    def event(self, payload: bytes, out: list[Event]) -> bool:
        """Whether `payload` is a text chunk of the template; its text (when not empty) is
        appended to `out` if so."""
        pre = self._pre
        if pre is None or not payload.startswith(pre) or not payload.endswith(self._suf):
            return False
        parts: list[bytes] = []
        return self._parts(payload, len(pre), parts) and self._decode(parts, out)

    def run(self, data: bytes, start: int, out: list[Event]) -> int:
        """Where the text chunks of the template that `data` holds from `start` (where an event
        begins) end, each a whole event in the usual framing (`data: `, the payload, a blank
        line); their texts are appended to `out`. `start` when there are none. (`event`'s test
        with the framing in front, for every event of the read at once.)"""
        if self._pre is None or not data.startswith(self._lead, start):
            return start  # not even the first: no need to cut the read
        last = len(data) - 2
        if data.find(b"\n", start) == last and data.endswith(b"\n\n"):
            # The read is this one event (a model's stream: an event a write).
            return last + 2 if self.event(data[start + len(_FRAMING) : last], out) else start
        parts: list[bytes] | None = None
        if data is not self._refused:
            parts, used = self._whole(data, start)
            # Refused, the read is cut event by event, and not tried whole again after each
            # other event in it (which would take a read of many apart as many times).
            self._refused = data if parts is None else None
        if parts is None:
            parts, used = self._cut(data, start)
        if not parts or self._decode(parts, out):
            return used
        # A chunk only looked like the template: the ones before it, each on its own.
        used, per, frame = start, self._per, len(self._lead) + len(self._tail) + sum(map(len, self._segs))
        for n in range(0, len(parts), per):
            one = parts[n : n + per]
            if not self._decode(one, out):
                break
            used += frame + sum(map(len, one))
        return used

    def _whole(self, data: bytes, start: int) -> tuple[list[bytes] | None, int]:
        """The holes and texts of the events from `start` to the last that ends as the template
        does, and where they end, when every one of them is the template's; None otherwise. (The
        usual read, in a few passes over all of it instead of a few per event.)"""
        end = data.rfind(self._tail, start)
        if end < 0:
            return None, start
        end += len(self._tail)
        run = data[start:end]
        # An event a line, each followed by a blank one (when the read is as it should be: the
        # check below is what proves it).
        middles = list(map(itemgetter(self._middle), run.split(b"\n")[:-1:2]))
        segs = self._segs
        if segs:
            joined = b"\n".join(middles)
            for seg in segs:
                joined = joined.replace(seg, b"\n")
            parts = joined.split(b"\n")
            if len(parts) != len(middles) * self._per:
                return None, start
        else:
            parts = middles
        # Put back together: each piece, then the template's bytes that follow it.
        rebuilt: list[bytes] = [b""] * (2 * len(parts))
        rebuilt[::2] = parts
        rebuilt[1::2] = self._seps * len(middles)
        again = b"".join(rebuilt)  # the run without its first event's lead, and the next's after it
        if len(again) != len(run) or not again.startswith(run[len(self._lead) :]):
            return None, start
        return parts, end

    def _cut(self, data: bytes, start: int) -> tuple[list[bytes], int]:
        """`run`'s holes and texts of the events from `start` that are the template's, and where
        they end, event by event (a read whose run `_whole` could not prove whole: one with
        another event in it, or an event that breaks off)."""
        lead, suf = self._lead, self._suf
        begin, tail, segs = len(lead), len(suf), self._segs
        parts: list[bytes] = []
        used = start
        while (blank := data.find(b"\n\n", used)) >= 0:
            event = data[used:blank]
            if not event.startswith(lead) or not event.endswith(suf):
                break
            at, whole = begin, True
            if segs:
                # _parts, written out: this runs once per streamed token.
                for seg in segs:
                    end = event.find(seg, at)
                    if end < 0:
                        whole = False
                        break
                    parts.append(event[at:end])
                    at = end + len(seg)
            if not whole:
                del parts[len(parts) - len(parts) % self._per :]  # the holes it did have
                break
            parts.append(event[at : len(event) - tail])
            used = blank + 2
        return parts, used
