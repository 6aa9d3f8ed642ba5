"""A stream's text chunks, read from a template instead of decoded one by one.

A server's text events differ from one to the next in their text and in little else: the ids,
model, index and null fields are the stream's own. Once a parser has read such an event whole,
`TextChunks.learn` keeps its bytes around its text, framing included (`data: `, `data:`, an
`event:` line). A later event that has exactly those bytes around one JSON string is that text
and nothing else, so it is read by decoding the string alone; a read made of such events (the
usual read of a fast stream) is cut at its blank lines and its strings decoded together, as one
JSON array. Anything else (another field set, a finish, usage, other framing) falls back to the
parser's full reading, which is the authority: the template only ever repeats what it said of
the events it was learned from.

Some fields change from one event to the next in ways the reading ignores or can fold over a run
(ids, timings, sequence numbers, log probabilities that count tokens): the dialect names them
(`varying`, by path, gateway.codec.skeleton). Such a field is a hole in the template, each
hole one JSON value; a field named `always` is a hole from the first event, the others once two
events read whole differ there and nowhere else the reading looks. The values of the holes the
dialect reads go, run by run, to its `take`; the others are only checked to be one value each.

A run of such events is taken apart in a few passes over the whole read (its events, the bytes
between the template's, its holes) and then put back together from the pieces and the template's
bytes: when that gives the read back byte for byte, every event was the template's, and the
pieces are its texts and holes. Anything else is cut event by event.
"""

import itertools
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any

from gateway import jsonutil
from gateway.codec.skeleton import units
from gateway.neutral.events import Event, text_events

# How often a stream's events may be read whole with no template read in between before no more
# is learned (a server whose text events differ in what the reading looks at, or whose texts are
# escaped otherwise than orjson escapes them: its events are read whole, as before).
_TRIES = 8
_STR = {str}
# How many of a read's last events that end as the template's do, but are not (a stream's
# closing events), are left out one by one before the read is cut event by event.
_CLOSING = 4
_DATA = (b"data: ", b"data:")  # a template's framing starts with a data line (after a name or not)

# What a dialect does with a run of its template's events, given the parser reading them (a plain
# function: a template holding a bound method would make each stream a reference cycle), their
# texts and the values of each hole it reads (by path, one per event): appends them to `out`.
Take = Callable[[Any, list[str], dict[str, list[Any]], list[Event]], None]

# What a template was learned from: framing, values' paths, bytes between, values, which are holes.
_Learned = tuple[bytes, tuple[str, ...], tuple[bytes, ...], tuple[bytes, ...], frozenset[int]]

ALWAYS = True  # `varying[path]`: a hole from the first event
SEEN = False  # a hole once it was seen to change

# The templates streams learned, by what they were for (text path, varying fields, take, reads):
# a server's next stream most often writes its text events as the last one did, and a template
# it fits is taken over instead of learned anew (its holes are varying fields, so a hole more
# than this stream would have learned is a field its reading ignores or folds).
_Kind = tuple[str, tuple[tuple[str, bool], ...], Take | None, tuple[str, ...], bool]
_KEPT: dict[_Kind, list[tuple[Any, ...]]] = {}
_KINDS = 32  # kinds kept before all are forgotten
_PER_KIND = 4  # templates kept a kind, the latest first
# What a template is: TextChunks' slots that `_build` and `learn` set.
_STATE = (
    "_learned",
    "_pre",
    "_segs",
    "_suf",
    "_per",
    "_text_at",
    "_held",
    "_index",
    "_framing",
    "_lead",
    "_tail",
    "_line",
    "_middle",
    "_seps",
)


class TextChunks:
    """The template of one stream's text events: `text` is the text's path; `varying` the paths
    of fields that may change between events (ALWAYS or SEEN); `reads` those whose values go to
    `take` with the reading parser (`owner` of `run` and `event`); by default the texts become
    TextRun and TextDelta events, empty ones too when `empty`."""

    __slots__ = (
        "_empty",
        "_framing",
        "_held",
        "_index",
        "_lead",
        "_learned",
        "_line",
        "_middle",
        "_per",
        "_pre",
        "_reads",
        "_refused",
        "_segs",
        "_seps",
        "_suf",
        "_tail",
        "_take",
        "_text",
        "_text_at",
        "_tries",
        "_varying",
        "read",
    )

    def __init__(
        self,
        text: str,
        varying: Mapping[str, bool] | None = None,
        take: Take | None = None,
        reads: tuple[str, ...] = (),
        empty: bool = False,
    ) -> None:
        self._text = text
        self._varying = varying or {}
        self._take = take
        self._reads = reads
        self._empty = empty
        self._pre: bytes | None = None  # the payload's bytes up to the first hole
        self._framing = b""  # the event's lines before its payload, and the data field's name
        self._suf = b""  # the payload's bytes after the last hole
        self._segs: tuple[bytes, ...] = ()  # the bytes between holes, in order
        self._per = 1  # holes an event (the text is one)
        self._text_at = 0  # which hole is the text
        self._held: tuple[tuple[str, int], ...] = ()  # the holes `take` reads: path, place
        self._lead = b""  # an event's first bytes: the framing and the payload's up to the first hole
        # For a run of events: where each ends (the bytes after the last hole and the blank
        # line), and the bytes that follow each hole of a run put back together (the last: to
        # the next event's first).
        self._tail = b""
        self._line = 0  # which line of an event is its data line
        self._middle = slice(0)  # that line's bytes between the template's lead and tail
        self._seps: tuple[bytes, ...] = ()
        # What the template was learned from (a later event is compared with it), or, learned the
        # cheap way, its framing and payload, read value by value when needed.
        self._learned: _Learned | bytes | None = None
        self._refused: bytes | None = None  # the last read whose run `_whole` could not prove
        self._index = 0
        self._tries = _TRIES
        self.read = 0  # events read from the template

    @property
    def learning(self) -> bool:
        return self._tries > 0

    @property
    def active(self) -> bool:
        """Known, or still to be learned."""
        return self._tries > 0 or self._pre is not None

    def stop(self) -> None:
        """Nothing more is read from the template (the stream's reading is over)."""
        self._tries = 0
        self._pre = None

    def learn(self, payload: bytes, index: int, frame: bytes | None = None, text: str | None = None) -> None:
        """`payload` was read whole and is one choice's text and nothing else that the reading
        looks at but the `varying` fields: keep its bytes around the text and those fields.
        `frame`: the event's bytes as they came (framing, payload, blank line), when known;
        `text`: the text as it was read, when known."""
        self._tries -= 1
        framing = b"data: "
        if frame is not None:
            framing = frame[: len(frame) - len(payload) - 2]
            if not frame.endswith(payload + b"\n\n") or not framing.endswith(_DATA) or b"\r" in framing:
                return
            if framing.count(b"\n") > 1 or (b"\n" in framing and not framing.startswith(b"event:")):
                return  # an id, a retry or a second data line: no template of the usual kind
        # A payload of several lines (an event of several `data:` lines) teaches no template: on
        # the wire each of its lines has a `data:` of its own, which the template would lack.
        if b"\n" in payload or b"\r" in payload:
            return
        if text is not None:
            if self._known(payload, index, framing, text):
                return
            if self._learned is None and self._plain(payload, text, index, framing):
                self._keep()
                return
        found = units(payload)
        if found is None:
            return
        paths = tuple(u.path for u in found)
        values = tuple(payload[u.start : u.end] for u in found)
        between = tuple(payload[a.end : b.start] for a, b in itertools.pairwise(found))
        at = [n for n, u in enumerate(found) if u.path == self._text]
        if len(at) != 1 or not values[at[0]].startswith(b'"'):
            return
        varying = self._varying
        holes = {at[0], *(n for n, p in enumerate(paths) if varying.get(p))}
        old = self._learned
        if isinstance(old, bytes):  # learned the cheap way: its values are read now
            old = self._learned = self._skeleton(old)
        if old is not None and old[:3] == (framing, paths, between):
            changed = {n for n, (a, b) in enumerate(zip(old[3], values, strict=True)) if a != b}
            if all(paths[n] in varying or n == at[0] for n in changed):
                holes |= old[4] | changed
        self._learned = (framing, paths, between, values, frozenset(holes))
        order = sorted(holes)
        spans = [(found[n].start, found[n].end) for n in order]
        self._build(payload, spans, order.index(at[0]), tuple(paths[n] for n in order), framing, index)
        self._keep()

    def _kind(self) -> _Kind:
        return (self._text, tuple(self._varying.items()), self._take, self._reads, self._empty)

    def _known(self, payload: bytes, index: int, framing: bytes, text: str) -> bool:
        """Whether a text event read whole (`text`) fits a template a stream of the same kind
        learned, which is then this stream's (a stream's first, or one its template missed)."""
        kept = _KEPT.get(self._kind())
        if not kept:
            return False
        current = self._state()
        best = None
        # The one with the fewest holes of those it fits (the cheapest read; a stream's first
        # text event may fit both its own kind's first template and the one learned after a
        # field changed), the latest of equals.
        for state in kept:
            # state[7], [8], [1], [4]: its index, framing, first bytes and holes (see _STATE).
            if state[7] != index or state[8] != framing or not payload.startswith(state[1]):
                continue
            if best is not None and state[4] >= best[4]:
                continue
            self._set(state)
            parts: list[bytes] = []
            if payload.endswith(self._suf) and self._parts(framing + payload, parts) and self._text_of(parts) == text:
                best = state
        self._set(current if best is None else best)
        return best is not None

    def _state(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _STATE)

    def _set(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(_STATE, state, strict=True):
            setattr(self, name, value)

    def _text_of(self, parts: list[bytes]) -> str | None:
        """The text an event's holes hold, when each is one JSON value."""
        body = b",".join(parts)
        try:
            values = jsonutil.loads(b"[" + body + b"]")
        except jsonutil.JSONDecodeError:
            return None
        if 10 in body or 13 in body or len(values) != len(parts) or type(values[self._text_at]) is not str:
            return None
        text: str = values[self._text_at]
        return text

    def _keep(self) -> None:
        """This stream's template, for the streams after it (see `_known`)."""
        kind = self._kind()
        kept = _KEPT.get(kind)
        if kept is None:
            if len(_KEPT) >= _KINDS:
                _KEPT.clear()
            kept = _KEPT[kind] = []
        state = self._state()
        if state not in kept:
            kept.insert(0, state)
            del kept[_PER_KIND:]

    def _plain(self, payload: bytes, text: str, index: int, framing: bytes) -> bool:
        """The first template of a stream whose events have none of the fields that always
        change: its one hole is the text, found as its key and the text as orjson writes them,
        once (a key inside a string value has its quotes escaped, so it cannot be found there).
        The payload is read value by value only if a later event is to be compared with it."""
        varying, key = self._varying, self._text.rpartition(".")[2]
        if any(always and b'"' + p.rpartition(".")[2].encode() + b'"' in payload for p, always in varying.items()):
            return False
        found = b'"' + key.encode() + b'":' + jsonutil.dumps(text)
        at = payload.find(found)
        if at < 0 or payload.find(found, at + 1) >= 0:
            return False
        start = at + len(key) + 3
        self._learned = framing + b"\n" + payload
        self._build(payload, [(start, at + len(found))], 0, (self._text,), framing, index)
        return True

    def _skeleton(self, learned: bytes) -> "_Learned | None":
        """What a template learned the cheap way was learned from, value by value."""
        framing, _, payload = learned.rpartition(b"\n")
        found = units(payload)
        if found is None:
            return None
        paths = tuple(u.path for u in found)
        at = [n for n, p in enumerate(paths) if p == self._text]
        between = tuple(payload[a.end : b.start] for a, b in itertools.pairwise(found))
        values = tuple(payload[u.start : u.end] for u in found)
        return (framing, paths, between, values, frozenset(at[:1]))

    def _build(
        self,
        payload: bytes,
        spans: list[tuple[int, int]],
        text_at: int,
        names: tuple[str, ...],
        framing: bytes,
        index: int,
    ) -> None:
        """The template: `payload`'s bytes around its holes (`spans`, in order; the text the
        `text_at`-th, each named by its path)."""
        self._pre = payload[: spans[0][0]]
        self._segs = tuple(payload[a[1] : b[0]] for a, b in itertools.pairwise(spans))
        self._suf = payload[spans[-1][1] :]
        self._per = len(spans)
        self._text_at = text_at
        self._held = tuple((name, n) for n, name in enumerate(names) if name in self._reads)
        self._index = index
        self._framing = framing
        self._lead = framing + self._pre
        self._tail = self._suf + b"\n\n"
        self._line = framing.count(b"\n")
        self._middle = slice(len(self._lead) - framing.rfind(b"\n") - 1, -len(self._suf) or None)
        self._seps = (*self._segs, self._tail + self._lead)

    def _decode(self, parts: list[bytes], out: list[Event], owner: Any = None) -> bool:
        """The events whose holes `parts` holds, in order, into `out`: True, or False (with
        nothing added) unless every hole decodes as one JSON value and every text as one string
        (one part that holds two values, or a text that is not one string, and the event is
        something else, read the full way)."""
        body = b",".join(parts)
        if 10 in body or 13 in body:  # a part of two lines (a CR ends one too) is not the template's
            return False
        per = self._per
        try:
            # One event of a template without holes but its text (a model server's pace: an event
            # a read) is its text alone, decoded without a list around it.
            values = [jsonutil.loads(body)] if per == 1 and len(parts) == 1 else jsonutil.loads(b"[" + body + b"]")
        except jsonutil.JSONDecodeError:
            return False
        if len(values) != len(parts):
            return False
        texts = values[self._text_at :: per] if per > 1 else values
        if len(texts) == 1:
            if type(texts[0]) is not str:
                return False
        elif set(map(type, texts)) != _STR:
            return False
        self._tries = _TRIES
        self.read += len(texts)
        if self._take is None:
            text_events(texts, self._index, out, self._empty)
        else:
            self._take(owner, texts, {name: values[n::per] for name, n in self._held}, out)
        return True

    def _parts(self, payload: bytes, parts: list[bytes]) -> bool:
        """Put the holes of `payload` (an event's bytes from its lead on, to the end of its
        suffix) in `parts`; False when the bytes between them are not the template's."""
        at, before = len(self._lead), len(parts)
        for seg in self._segs:
            end = payload.find(seg, at)
            if end < 0:
                del parts[before:]
                return False
            parts.append(payload[at:end])
            at = end + len(seg)
        parts.append(payload[at : len(payload) - len(self._suf)])
        return True

    def event(self, payload: bytes, out: list[Event], owner: Any = None) -> bool:
        """Whether `payload` (an event's data, its framing gone) is a text event of a template
        that is framed as a data line alone; its text, if so, is appended to `out`."""
        pre = self._pre
        if pre is None or 10 in self._framing or not payload.startswith(pre) or not payload.endswith(self._suf):
            return False
        parts: list[bytes] = []
        return self._parts(self._framing + payload, parts) and self._decode(parts, out, owner)

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
            if event.endswith(self._suf) and self._parts(event, one) and self._decode(one, out, owner):
                return last + 2
            return start
        if data is not self._refused:
            # The run up to the read's last event that is the template's (not a closing one).
            stop = len(data)
            for _ in range(_CLOSING):
                whole, used, stop = self._whole(data, start, stop)
                if whole is not None and self._decode(whole, out, owner):
                    return used
                if stop <= start:
                    break
            # Refused: cut event by event, and not tried whole after each other event in it.
            self._refused = data
        parts, used = self._cut(data, start)
        if not parts or self._decode(parts, out, owner):
            return used
        # An event only looked like the template: the ones before it, each on its own.
        used, per = start, self._per
        frame = len(self._lead) + len(self._tail) + sum(map(len, self._segs))
        for n in range(0, len(parts), per):
            one = parts[n : n + per]
            if not self._decode(one, out, owner):
                break
            used += frame + sum(map(len, one))
        return used

    def _whole(self, data: bytes, start: int, stop: int) -> tuple[list[bytes] | None, int, int]:
        """The holes of the events from `start` to the last before `stop` that ends as the
        template does, where they end, and where that last event's tail begins; None when they
        are not every one the template's. (The usual read, in a few passes over all of it
        instead of a few per event.)"""
        found = data.rfind(self._tail, start, stop)
        if found < 0:
            return None, start, start
        end = found + len(self._tail)
        # A stream's closing events may end as the template's do: the last one is looked at first,
        # its holes read (MindIE's final event has the bytes between them, the texts and details
        # in one hole and a null text).
        last = data.rfind(b"\n\n", start, found)
        last = last + 2 if last >= 0 else start
        holes: list[bytes] = []
        if not data.startswith(self._lead, last) or not self._parts(data[last : end - 2], holes):
            return None, start, found
        if self._text_of(holes) is None:
            return None, start, found
        run = data[start:end]
        # Each event's bytes between its lead and its tail, from its data line, if the read is as
        # it should be (the check below proves it). A split at line ends (memchr) costs a fraction
        # of one at the long bytes between the events.
        lines = run.split(b"\n")
        middles = list(map(itemgetter(self._middle), lines[self._line : len(lines) - 1 : self._line + 2]))
        segs = self._segs
        if segs:
            joined = b"\n".join(middles)
            for seg in segs:
                joined = joined.replace(seg, b"\n")
            parts = joined.split(b"\n")
            if len(parts) != len(middles) * self._per:
                return None, start, found
        else:
            parts = middles
        # Put back together: each piece, then the template's bytes that follow it.
        rebuilt: list[bytes] = [b""] * (2 * len(parts))
        rebuilt[::2] = parts
        rebuilt[1::2] = self._seps * len(middles)
        again = b"".join(rebuilt)  # the run without its first event's lead, and the next's after it
        if len(again) != len(run) or not again.startswith(run[len(self._lead) :]):
            return None, start, found
        return parts, end, found

    def _cut(self, data: bytes, start: int) -> tuple[list[bytes], int]:
        """`run`'s holes of the events from `start` that are the template's, and where they end,
        event by event (a read whose run `_whole` could not prove whole: one with another event
        in it, or an event that breaks off)."""
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
