"""A stream's text chunks, read from a template instead of decoded one by one.

A server's text events differ from one to the next in their text and in little else: the ids,
model, index and null fields are the stream's own. Once a parser has read such an event whole,
`learn` keeps its bytes around its text, framing included (`data: `, `data:`, an
`event:` line). A later event that has exactly those bytes around one JSON string is that text
and nothing else, so it is read by decoding the string alone; a read made of such events (the
usual read of a fast stream) is cut at its blank lines and its strings decoded together, as one
JSON array. Anything else (another field set, a finish, usage, other framing) falls back to the
parser's full reading, which is the authority: the template only ever repeats what it said of
the events it was learned from.

How the template is learned from the events read whole, which fields are its holes, and how it
is kept for a server's next streams: gateway.codec.learning. The values of the holes the dialect
reads go, run by run, to its `take`; the others are only checked to be one value each.

A run of such events is taken apart in a few passes over the whole read: each event's bytes
between the template's lead and tail, proven to be the run with the lead and tail around each;
in those, each stretch of the template's bytes between two holes marked by a byte of its own
that no JSON holds, the marks proven to be in the template's order in every event; the holes,
what the marks separate, decoded as one JSON list, one value each. Anything else is cut event
by event.
"""

from operator import itemgetter
from typing import Any

from gateway import jsonutil
from gateway.codec.learning import TRIES, Template, cut_holes, text_in
from gateway.neutral.events import Event, text_events
from gateway.sse import lines_of

_STR = {str}


def _cuts(marks: bytes) -> tuple[tuple[bytes, ...], bytes, bytes, bytes]:
    """For a template with a byte of `marks` for each stretch between its holes: the marks, one
    event's marks and line end, every other byte, and the table that makes each a comma."""
    row = marks + b"\n"
    others = bytes(sorted(set(range(256)) - set(row)))
    return tuple(bytes((m,)) for m in marks), row, others, bytes.maketrans(row, b"," * len(row))


# Stand-ins for the bytes between a run's holes while it is cut apart: control bytes, which JSON
# holds neither inside a string nor between values (tab, line feed and carriage return, which it
# allows between values, are not among them), by how many stretches a template has.
_MARKS = bytes((*range(1, 9), 11, 12, *range(14, 32)))
_CUTS = [_cuts(_MARKS[:n]) for n in range(len(_MARKS) + 1)]
# How many of a read's last events that end as the template's do, but are not (a stream's
# closing events), are left out one by one before the read is cut event by event.
_CLOSING = 4


class TextChunks(Template):
    """The template of one stream's text events (gateway.codec.learning), and its reading: runs
    of them from a read, an event on its own. `owner`: the reading parser, handed to `take`; by
    default the texts become TextRun and TextDelta events, empty ones too when `empty`."""

    __slots__ = ()

    def _decode(self, body: bytes, count: int, out: list[Event], owner: Any = None) -> bool:
        """The events whose holes `body` holds (`count` of them, in order, between commas) into
        `out`: True, or False (with nothing added) unless every hole decodes as one JSON value
        and every text as one string (one part that holds two values, or a text that is not one
        string, and the event is something else, read the full way)."""
        if 10 in body or 13 in body:  # a part of two lines (a CR ends one too) is not the template's
            return False
        per = self._per
        try:
            # One event of a template without holes but its text (a model server's pace: an event
            # a read) is its text alone, decoded without a list around it.
            values = [jsonutil.loads(body)] if count == 1 else jsonutil.loads(b"[" + body + b"]")
        except jsonutil.JSONDecodeError:
            return False
        if len(values) != count:
            return False
        texts = values[self._text_at :: per] if per > 1 else values
        if len(texts) == 1:
            if type(texts[0]) is not str:
                return False
        elif set(map(type, texts)) != _STR:
            return False
        self._tries = TRIES
        self.read += len(texts)
        if self._take is None:
            text_events(texts, self._choice, out, self._empty)
        else:
            self._take(owner, texts, {name: values[n::per] for name, n in self._held}, out)
        return True

    def _decode_parts(self, parts: list[bytes], out: list[Event], owner: Any = None) -> bool:
        """`_decode` of the holes cut apart, in order."""
        return self._decode(b",".join(parts), len(parts), out, owner)

    def event(self, payload: bytes, out: list[Event], owner: Any = None) -> bool:
        """Whether `payload` (an event's data, its framing gone) is a text event of a template
        that is framed as a data line alone; its text, if so, is appended to `out`."""
        pre = self._pre
        if pre is None or 10 in self._framing or not payload.startswith(pre) or not payload.endswith(self._suf):
            return False
        parts: list[bytes] = []
        if not cut_holes(self._framing + payload, self._lead, self._segs, self._suf, parts):
            return False
        return self._decode_parts(parts, out, owner)

    def run(self, data: bytes, start: int, out: list[Event], owner: Any = None) -> int:
        """Where the text events of the template that `data` holds from `start` (where an event
        begins) end, each a whole event (its framing, the payload, a blank line); their texts
        are appended to `out`. `start` when there are none."""
        if self._pre is None or not data.startswith(self._lead, start):
            return start  # not even the first: no need to cut the read
        last = len(data) - 2
        if data.find(b"\n\n", start) == last:  # the read is this one event (a model's pace)
            event = data[start:last]
            one: list[bytes] = []
            if (
                event.endswith(self._suf)
                and cut_holes(event, self._lead, self._segs, self._suf, one)
                and self._decode_parts(one, out, owner)
            ):
                return last + 2
            return start
        if data is not self._refused:
            # The run up to the read's last event that is the template's (not a closing one).
            stop = len(data)
            for _ in range(_CLOSING):
                body, count, used, stop = self._whole(data, start, stop)
                if body is not None and self._decode(body, count, out, owner):
                    return used
                if stop <= start:
                    break
            # Refused: cut event by event, and not tried whole after each other event in it.
            self._refused = data
        parts, used = self._cut(data, start)
        if not parts or self._decode_parts(parts, out, owner):
            return used
        # An event only looked like the template: the ones before it, each on its own.
        used, per = start, self._per
        frame = len(self._lead) + len(self._tail) + sum(map(len, self._segs))
        for n in range(0, len(parts), per):
            one = parts[n : n + per]
            if not self._decode_parts(one, out, owner):
                break
            used += frame + sum(map(len, one))
        return used

    def _whole(self, data: bytes, start: int, stop: int) -> tuple[bytes | None, int, int, int]:
        """The holes of the events from `start` to the last before `stop` that ends as the
        template does (between commas, as `_decode` takes them), how many, where those events
        end, and where that last event's tail begins; None when they are not every one the
        template's. (The usual read, in a few passes over all of it instead of a few per event.)"""
        found = data.rfind(self._tail, start, stop)
        if found < 0:
            return None, 0, start, start
        end = found + len(self._tail)
        # A stream's closing events may end as the template's do: the last one is looked at first,
        # its holes read (MindIE's final event has the bytes between them, the texts and details
        # in one hole and a null text).
        last = data.rfind(b"\n\n", start, found)
        last = last + 2 if last >= 0 else start
        holes: list[bytes] = []
        if not data.startswith(self._lead, last) or not cut_holes(
            data[last : end - 2], self._lead, self._segs, self._suf, holes
        ):
            return None, 0, start, found
        if text_in(holes, self._text_at) is None:
            return None, 0, start, found
        run = data[start:end]
        # Each event's bytes between its lead and its tail, from its data line (cut at the line
        # ends, which costs a fraction of a cut at the long bytes between the events), proven to
        # be so: the run is each of them between the template's lead and tail.
        middles = list(map(itemgetter(self._middle), lines_of(run)[self._line :: self._line + 2]))
        joined = self._between.join(middles)
        if len(joined) != len(run) - len(self._lead) - len(self._tail) or not run.startswith(joined, len(self._lead)):
            return None, 0, start, found
        segs = self._segs
        if not segs:
            return b",".join(middles), len(middles), end, found
        if len(segs) >= len(_CUTS):
            return None, 0, start, found
        # The bytes between holes, each a mark of its own; an event's marks are then the
        # template's, in its order, when the marks and line ends alone are so many rows of them,
        # and the holes are what the marks and line ends separate, each to be one JSON value.
        marks, row, others, commas = _CUTS[len(segs)]
        held = b"\n".join(middles)
        for seg, mark in zip(segs, marks, strict=True):
            held = mark.join(held.split(seg))
        if held.translate(None, others) + b"\n" != row * len(middles):
            return None, 0, start, found
        return held.translate(commas), len(middles) * self._per, end, found

    def _cut(self, data: bytes, start: int) -> tuple[list[bytes], int]:
        """`run`'s holes of the events from `start` that are the template's, and where they end,
        event by event (a read whose run `_whole` could not prove whole: one with another event
        in it, or an event that breaks off)."""
        lead, segs, suf = self._lead, self._segs, self._suf
        parts: list[bytes] = []
        used = start
        while (blank := data.find(b"\n\n", used)) >= 0:
            event = data[used:blank]
            if not event.startswith(lead) or not event.endswith(suf) or not cut_holes(event, lead, segs, suf, parts):
                break
            used = blank + 2
        return parts, used
