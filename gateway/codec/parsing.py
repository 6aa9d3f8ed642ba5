"""The one skeleton of every upstream stream parser: SSE bytes in, neutral events out.

A read from the network may hold good events and then a fault (an error event, a malformed
payload, a raw text line). How the bytes were cut into reads must not decide whether the good
ones reach the client, so they are handed out first and the fault is raised on the next call.
A subclass says what one event's payload means (`on_event`) and what the end of the stream
means (`on_end`: a final event missing is a truncated stream for some dialects).
"""

import copy
import re
from abc import ABC, abstractmethod

from gateway.codec.renaming import renamed, renamed_first
from gateway.codec.textchunks import TextChunks
from gateway.neutral.errors import UpstreamClass, UpstreamError, clip
from gateway.neutral.events import Event, Frame, TextDelta
from gateway.sse import SSEDecoder, SSEEvent, encode_data, line_ends_are

# What a pass-through stream reports of token events it does not decode: a token came (for the
# time-to-first-token and inter-token metrics); the events themselves go out as a Frame.
A_TOKEN = TextDelta("")
# What a payload that is not what the dialect promises raises while it is read.
PARSE_ERRORS = (UpstreamError, ValueError, KeyError, TypeError, AttributeError, IndexError)


class TokenEvents:
    """A dialect's token events as a pass-through relays them undecoded: each an `event:` line
    naming them and one `data:` line whose payload names the same type
    (`{"type":"content_block_delta",...}`). Their bytes are made once, not at each read.

    Between two such events lies a *seam*: the end of one event's payload, its blank line and the
    next one's head, up to its payload's brace. Where the payload names its type last (vLLM's
    Responses events), the seam is taken from that name on, and one count of it proves each
    event's type where the name comes last, which is what a decoder keeps (`named_run`)."""

    __slots__ = ("head", "kind", "last", "last_seam", "seam")

    def __init__(self, name: bytes) -> None:
        self.head = b"event: " + name + b"\ndata: "
        self.kind = b'"type":"' + name + b'"'
        self.seam = b"}\n\n" + self.head + b"{"
        self.last = self.kind + b"}\n\n"
        self.last_seam = self.kind + self.seam


def named_run(data: bytes, tokens: TokenEvents) -> int:
    """How many leading bytes of a read are whole `tokens` events, and nothing else: a
    pass-through's token events, which go to the client undecoded. 0 when the read does not
    start that way. (Counted, not split: these scans are the whole cost.)"""
    head = tokens.head
    if not data.startswith(head) or 13 in data:  # a CR (its code: found by memchr)
        return 0
    # Back from the read's end over the events that need reading (a block's or the message's
    # end, usage) to the last token event; what comes before it must be token events too.
    end = data.rfind(b"\n\n") + 2
    if end < 2:
        return 0
    for _ in range(8):  # a stream's end is a few events
        # The start of the last event before `end`: the read's own start when it is the first.
        found = data.rfind(b"\n\n", 0, end - 2)
        start = found + 2 if found >= 0 else 0
        if data.startswith(head, start):
            break
        end = start
    else:
        return 0
    # Three line ends an event: the seams', the first head's and the last blank line are all of
    # them exactly when each event is a head and one line of payload (no seam overlaps another
    # or the run's ends: none has a border, nor holds a brace or quote where a head holds one).
    # A seam ends with a brace, which few bytes of a payload are: CPython's search skips fastest
    # along a needle whose last byte is rare.
    if not data.startswith(b"{", len(head)) or not data.endswith(b"}\n\n", 0, end):
        return 0
    if data.endswith(tokens.last, 0, end):
        events = data.count(tokens.last_seam, 0, end) + 1
    else:
        events = data.count(tokens.seam, 0, end) + 1
        if data.count(tokens.kind, 0, end) != events:
            return 0
    return end if line_ends_are(data, end, 3 * events) else 0


def named_events(block: bytes) -> bool:
    """Whether `block` is whole events of an `event: ` line and a `data: ` line each, and
    nothing else. Counted, not split: with `n` heads (the first, and one after each blank line)
    and `n` data lines, `3n` line ends leave room for only the `n` blank lines between and after
    them, so no other line (a comment, an id, a stray text) can be among them."""
    if not block.startswith(b"event: ") or not block.endswith(b"\n\n") or 13 in block:  # a CR (found by memchr)
        return False
    events = block.count(b"\n\nevent: ") + 1
    return block.count(b"\ndata: ") == events and line_ends_are(block, len(block), 3 * events)


class Quiet:
    """What makes an event of a pass-through one its reading must see: a kind its payload names
    (`kinds`, a pattern: text deltas, the end, an error) or bytes it holds (`marks`: a field
    the relay changes). Every other event goes to the client as it came and tells the reading
    nothing, so a run of them is relayed in one piece, undecoded (`EventParser._relay`)."""

    __slots__ = ("kinds", "marks")

    def __init__(self, kinds: re.Pattern[bytes], marks: tuple[bytes, ...] = ()) -> None:
        self.kinds = kinds
        self.marks = marks

    def first(self, data: bytes, start: int, named: int) -> tuple[int, int]:
        """Where the first loud thing of `data` from `start` begins (-1: nowhere), and where
        the first kind named does, as far as it was looked for (-2: not known). `named` is that
        from an earlier start: the search for kinds, the slow one, passes over each byte once,
        and only up to the first mark."""
        at = -1
        for mark in self.marks:
            m = data.find(mark, start) if at < 0 else data.find(mark, start, at)
            if m >= 0:
                at = m
        if named == -2 or 0 <= named < start:
            found = self.kinds.search(data, start) if at < 0 else self.kinds.search(data, start, at)
            named = found.start() if found is not None else -1 if at < 0 else -2
        if named >= 0 and (at < 0 or named < at):
            at = named
        return at, named


def _before(data: bytes, start: int, at: int) -> int:
    """Where the blank line before the event that `at` lies in begins (< `start`: none after
    `start`). Looked for by its line ends (memchr) where the event is a name and a data line
    and `at` in the data; a guess either way, which only says where the events read the full
    way begin."""
    line = data.rfind(b"\n", start, at)
    named = data.rfind(b"\n", start, line) if line > start else -1
    if named < 0:
        return -1  # the event begins at `start`
    if data[named - 1] == 10:
        return named - 1
    return data.rfind(b"\n\n", start, at)


def _after(data: bytes, at: int) -> int:
    """Where the event that `at` lies in ends, its blank line included (the end of `data` when
    it does not); looked for as `_before` looks."""
    nl = data.find(b"\n", at)
    if nl >= 0 and data.startswith(b"\n", nl + 1):
        return nl + 2
    blank = data.find(b"\n\n", at)
    return len(data) if blank < 0 else blank + 2


def kept(e: Exception) -> Exception:
    """A fault kept to raise later, as a copy each time: kept with its traceback, or the fault it
    was raised from, the frames there (which hold the parser) and the parser would hold each
    other, and the request with them, until the collector came by."""
    e.__traceback__ = e.__context__ = e.__cause__ = None
    return e


def broken_off(text: str) -> UpstreamError:
    """What a backend wrote into its stream instead of an event, for the client (`clip`ped)."""
    return UpstreamError(f"backend broke off the stream: {clip(text)}", upstream_class=UpstreamClass.MIDSTREAM)


def not_events(text: str) -> UpstreamError:
    """A stream that is not an event stream from its first line (an HTML page, a JSON answer):
    what it says is for the log, not the client, who gets the gateway's words."""
    return UpstreamError(
        "backend answered with something other than an event stream",
        upstream_class=UpstreamClass.MIDSTREAM,
        detail=repr(text[:200]),
    )


class EventParser(ABC):
    """With `chunks`, the stream's text chunks are read from its template (gateway.codec
    .textchunks), which `on_event` teaches from a chunk it read whole; every other event is
    `on_event`'s.

    A parser that `relays` (a pass-through: the client speaks the backend's wire) hands each
    event on as it came, by `relayed` from `on_event`; what dispatches no event (comments, a
    keep-alive) goes on as a Frame of its own."""

    __slots__ = ("_began", "_block", "_chunks", "_decoder", "_fault", "_frame", "_quiet", "_relays")
    # Whether a last event that the stream's end cuts off from its blank line still counts.
    unterminated_last = False

    def __init__(self, chunks: TextChunks | None = None, relays: bool = False, quiet: Quiet | None = None) -> None:
        self._decoder = SSEDecoder(keep=relays)
        self._quiet = quiet if relays else None
        self._fault: Exception | None = None
        self._began = False  # an event has come: the stream is an event stream
        self._chunks = chunks
        self._relays = relays
        self._block: bytes | None = None  # the lines of the event `on_event` reads, relaying
        self._frame: bytes | None = None  # the bytes of the one event `on_event` reads, when known

    def teach(self, payload: bytes, index: int = 0, text: str | None = None) -> None:
        """`payload`, just read whole by `on_event`, is a text event that teaches the template
        (`text`: its text as read)."""
        chunks = self._chunks
        if chunks is not None and chunks.learning:
            chunks.learn(payload, index, self._frame, text)

    @abstractmethod
    def on_event(self, data: bytes, out: list[Event]) -> None:
        """Append what one event's payload means; raise on a payload that is not valid."""

    def on_end(self, out: list[Event]) -> None:  # noqa: B027 - most streams need nothing at the end
        """The upstream closed the stream: append closing events, or raise when it was cut short."""

    def feed(self, data: bytes) -> list[Event]:
        return self._events(data) if self._chunks is None else self._texts(self._chunks, data)

    def _events(self, data: bytes, tried: bool = False) -> list[Event]:
        """The read event by event: a lone chunk of the template from it, anything else by
        `on_event`; `tried`: the read is one event the template did not read."""
        if self._fault is not None:
            raise copy.copy(self._fault)
        out: list[Event] = []
        chunks = None if tried else self._chunks
        decoder = self._decoder
        try:
            if self._relays:
                self._relay(data, out)
            else:
                for payload in decoder.feed_data(data):
                    if chunks is None or not chunks.event(payload, out, self):
                        self.on_event(payload, out)
            if decoder.stray:
                self._check_stray(out)
        except PARSE_ERRORS as e:
            if not out:
                raise
            self._fault = kept(e)
        if out:
            self._began = True
        return out

    def _relay(self, data: bytes, out: list[Event]) -> None:
        """A pass-through read: its runs of quiet events (see `Quiet`) in one piece each, every
        other event the full way."""
        quiet, decoder = self._quiet, self._decoder
        pos, size = 0, len(data)
        if quiet is not None and 13 not in data:  # a CR (found by memchr): the full way
            named = -2
            # (After a stray line nothing more is dispatched: the decoder has the rest.)
            while pos < size and decoder.between_events() and not decoder.stray:
                at, named = quiet.first(data, pos, named)
                # The whole events before the event the first loud thing is in.
                blank = _before(data, pos, at) if at >= 0 else data.rfind(b"\n\n", pos)
                if blank >= pos:
                    block = data[pos : blank + 2]
                    if named_events(block):
                        decoder.skipped()
                        out.append(Frame(block))
                    else:
                        self._take(decoder.feed(block), out)
                    pos = blank + 2
                if at < 0:
                    break
                # That event, read the full way (with what follows it, when it is not whole).
                end = _after(data, at)
                self._take(decoder.feed(data[pos:end] if pos or end < size else data), out)
                pos = end
        if pos < size:
            self._take(decoder.feed(data[pos:] if pos else data), out)

    def _take(self, events: list[SSEEvent], out: list[Event]) -> None:
        """Whole events, one by one (those that dispatch none are relayed, when relaying)."""
        chunks = self._chunks
        for ev in events:
            if not ev.dispatched:
                assert ev.raw is not None
                out.append(Frame(ev.raw))
            elif chunks is None or not chunks.event(ev.data, out, self):
                self._block = ev.raw
                try:
                    self.on_event(ev.data, out)
                finally:
                    self._block = None

    def taken_back(self, data: bytes) -> bytes:
        """A pass-through read with the start of the event the read before it broke off in (a
        read may end anywhere), which the decoder gives back when that is all it holds: the
        read starts between events again, and its whole events may go out as runs rather than
        each read the full way."""
        if self._fault is None:
            held = self._decoder.take_partial()
            if held:
                return held + data
        return data

    def relay_run(self, data: bytes, tokens: TokenEvents) -> list[Event] | None:
        """A pass-through read whose leading events are `tokens` (see `named_run`): they go out
        as they came, undecoded, telling the metrics a token came; the rest is read event by
        event. None when the read does not start that way."""
        if self._fault is not None or not self._decoder.between_events():
            return None
        # The few events before the first token event (a stream's opening) are read whole.
        start = data.find(tokens.head)
        if start < 0 or (start and not data.endswith(b"\n\n", 0, start)):
            return None
        end = named_run(data[start:] if start else data, tokens)
        if not end:
            return None
        out: list[Event] = self._events(data[:start]) if start else []
        if self._fault is not None:
            return out  # raised at the next read, after what came before it went out
        if not self._decoder.between_events():
            return out + self._events(data[start:])
        self._decoder.skipped()
        self._began = True
        out += [Frame(data[start : start + end]), A_TOKEN]
        if start + end < len(data):
            try:
                out += self._events(data[start + end :])
            except PARSE_ERRORS as e:
                self._fault = kept(e)  # raised at the next read, after what came before it went out
        return out

    def relayed(self, data: bytes, key: str, name: bytes | None) -> bytes:
        """The event `on_event` reads (its payload `data`) as a client of the backend's own wire
        gets it: its lines as they came, or (a lone `data:` line) the payload framed again;
        with `name`, its `key` field renamed (see `renamed`)."""
        block = self._block
        if block is None:
            return encode_data(data if name is None else renamed(data, key, name))
        if name is None:
            return block
        out = renamed_first(block, key, name)
        if out is not None:
            return out
        whole = renamed_first(data, key, name)
        if whole is None:
            return block
        # The name's field is cut across two `data:` lines: the payload's lines framed again.
        return b"data: " + whole.replace(b"\n", b"\ndata: ") + b"\n\n"

    def _texts(self, chunks: TextChunks, data: bytes) -> list[Event]:
        """A read with a template: runs of text chunks from it, each other event (one that
        may teach the template, a finish, usage) read on its own."""
        if self._fault is not None or not chunks.active:
            return self._events(data)
        # A read that ends inside an event leaves its start in the decoder: taken back, the
        # next read starts between events again.
        held = self._decoder.take_partial()
        if held:
            data = held + data
        out: list[Event] = []
        pos, size = 0, len(data)
        try:
            while pos < size and self._decoder.between_events() and chunks.active:
                pos = chunks.run(data, pos, out, self)
                if pos == size:
                    break
                # A lone LF blank line ends an event (a stream with CRs goes the general way).
                blank = data.find(b"\n\n", pos)
                if blank < 0:
                    break
                self._frame = data[pos : blank + 2]
                try:
                    out += self._events(self._frame, tried=True)
                finally:
                    self._frame = None
                pos = blank + 2
            if pos < size:
                out += self._events(data[pos:] if pos else data)
        except PARSE_ERRORS as e:
            if not out:
                raise
            self._fault = kept(e)  # raised at the next read, after what came before it went out
        if out:
            self._began = True
        return out

    def close(self) -> list[Event]:
        if self._fault is not None:
            raise copy.copy(self._fault)
        out: list[Event] = []
        # A last event without its blank line is discarded, as the SSE rules say, unless the
        # dialect's servers end that way.
        last = self._decoder.feed(b"\n\n") if self.unterminated_last else []
        self._take(last + self._decoder.close(), out)
        self._check_stray(out)
        self.on_end(out)
        return out

    def _check_stray(self, out: list[Event]) -> None:
        # Lines that are not SSE fields: some servers write raw text into a stream on failure,
        # which is their word on it; before any event, the answer is no event stream at all.
        stray = self._decoder.stray
        if stray:
            text = b" ".join(stray).decode("utf-8", "replace")
            raise broken_off(text) if self._began or out else not_events(text)
