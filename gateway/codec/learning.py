"""How a stream's text template is learned (gateway.codec.textchunks reads with it), and kept for
the streams after it.

A text event read whole teaches the template: its bytes around the text, framing included (`data: `,
`data:`, an `event:` line). Some fields change from one event to the next in ways the reading
ignores or can fold over a run (ids, timings, sequence numbers, log probabilities that count
tokens): the dialect names them (`varying`, by path, gateway.codec.skeleton). Such a field is a
hole in the template, each hole one JSON value; a field named `always` is a hole from the first
event, the others once two events read whole differ there and nowhere else the reading looks.

A server's next stream most often writes its text events as the last one did, so the templates
learned are kept by what they are for (the text's path, the varying fields, what the dialect
reads), a few of each: a text event read whole that fits one, its text read from the holes the
same as the full reading's, takes it over instead of being cut at its values again.
"""

import itertools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from gateway import jsonutil
from gateway.codec.skeleton import units
from gateway.neutral.events import Event

# How often a stream's events may be read whole with no template read in between before no more
# is learned (a server whose text events differ in what the reading looks at, or whose texts are
# escaped otherwise than orjson escapes them: its events are read whole, as before).
TRIES = 8
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


class _Kept(NamedTuple):
    """A template as kept for later streams: the slots of Template that `_build` and `learn` set."""

    learned: "_Learned | bytes | None"
    pre: bytes | None
    segs: tuple[bytes, ...]
    suf: bytes
    per: int
    text_at: int
    held: tuple[tuple[str, int], ...]
    choice: int  # the choice index its events are of
    framing: bytes
    lead: bytes
    tail: bytes
    line: int
    middle: slice
    between: bytes


_SLOTS = tuple("_" + name for name in _Kept._fields)
_KEPT: dict[_Kind, list[_Kept]] = {}
_KINDS = 32  # kinds kept before all are forgotten
_PER_KIND = 4  # templates kept a kind, the latest first


class Template:
    """What a stream's text events are around their holes, as learned from those read whole:
    `text` is the text's path; `varying` the paths of fields that may change between events
    (ALWAYS or SEEN); `reads` those whose values go to `take`; `empty`: empty texts are events
    too."""

    __slots__ = (
        "_between",
        "_choice",
        "_empty",
        "_framing",
        "_held",
        "_lead",
        "_learned",
        "_line",
        "_middle",
        "_per",
        "_pre",
        "_reads",
        "_refused",
        "_segs",
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
        # line), and the bytes between one event's last hole and the next one's first.
        self._tail = b""
        self._line = 0  # which line of an event is its data line
        self._middle = slice(0)  # that line's bytes between the template's lead and tail
        self._between = b""
        # What the template was learned from (a later event is compared with it), or, learned the
        # cheap way, its framing and payload, read value by value when needed.
        self._learned: _Learned | bytes | None = None
        self._choice = 0
        self._tries = TRIES
        # What reading with it keeps (gateway.codec.textchunks): the last read whose run could
        # not be proven whole, and how many events it read.
        self._refused: bytes | None = None
        self.read = 0

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
        best: _Kept | None = None
        # The one with the fewest holes of those it fits (the cheapest read; a stream's first
        # text event may fit both its own kind's first template and the one learned after a
        # field changed), the latest of equals.
        event = framing + payload
        for one in kept:
            if one.choice != index or one.framing != framing or one.pre is None or not payload.startswith(one.pre):
                continue
            if (best is not None and one.per >= best.per) or not payload.endswith(one.suf):
                continue
            parts: list[bytes] = []
            if cut_holes(event, one.lead, one.segs, one.suf, parts) and text_in(parts, one.text_at) == text:
                best = one
        if best is None:
            return False
        self._set(best)
        return True

    def _state(self) -> _Kept:
        return _Kept(*map(self.__getattribute__, _SLOTS))

    def _set(self, template: _Kept) -> None:
        for name, value in zip(_SLOTS, template, strict=True):
            setattr(self, name, value)

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
        self._choice = index
        self._framing = framing
        self._lead = framing + self._pre
        self._tail = self._suf + b"\n\n"
        self._line = framing.count(b"\n")
        # (The data line as `lines_of` gives it: its line end last.)
        self._middle = slice(len(self._lead) - framing.rfind(b"\n") - 1, -len(self._suf) - 1)
        self._between = self._tail + self._lead


def cut_holes(payload: bytes, lead: bytes, segs: tuple[bytes, ...], suf: bytes, parts: list[bytes]) -> bool:
    """Put the holes of `payload` (an event's bytes from its lead on, to the end of its suffix)
    in `parts`, for a template of that lead, bytes between holes (`segs`) and suffix; False when
    the bytes between them are not the template's."""
    at, before = len(lead), len(parts)
    for seg in segs:
        end = payload.find(seg, at)
        if end < 0:
            del parts[before:]
            return False
        parts.append(payload[at:end])
        at = end + len(seg)
    parts.append(payload[at : len(payload) - len(suf)])
    return True


def text_in(parts: list[bytes], text_at: int) -> str | None:
    """The text an event's holes (`parts`, from `cut_holes`) hold (the `text_at`-th), when each
    is one JSON value."""
    body = b",".join(parts)
    try:
        values = jsonutil.loads(b"[" + body + b"]")
    except jsonutil.JSONDecodeError:
        return None
    if 10 in body or 13 in body or len(values) != len(parts) or type(values[text_at]) is not str:
        return None
    text: str = values[text_at]
    return text
