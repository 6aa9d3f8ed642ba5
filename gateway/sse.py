"""Sans-IO Server-Sent Events: a decoder fed raw bytes that yields events, and byte encoders.

The decoder follows the WHATWG event-stream rules: lines end with CRLF, CR or LF; a field name
is separated from its value by a colon and at most one space; lines starting with a colon are
comments; a blank line dispatches the event. Bytes are kept until a whole line has arrived, so
an event or a UTF-8 character split across reads decodes the same as if it came in one piece.
"""

from dataclasses import dataclass
from io import BytesIO

DONE = b"[DONE]"
_BOM = b"\xef\xbb\xbf"


def line_ends_are(data: bytes, end: int, n: int) -> bool:
    """Whether `data[:end]`, which ends with a line end (LF), holds exactly `n` of them (`n` > 0).

    `bytes.count` of one byte is a plain loop in CPython, a cycle a byte: on a 50 KB read of
    events it was the biggest single cost of relaying them. `replace` of one byte by another
    looks for each with memchr instead: with the first `n - 1` line ends replaced, the next one
    left must be the last byte of the range, which holds when there are `n` and only then (fewer,
    and none is left before `end`; more, and one is left before the last byte)."""
    return data.replace(b"\n", b"\r", n - 1).find(b"\n", 0, end) == end - 1


def lines_of(data: bytes) -> list[bytes]:
    """`data`'s lines, each with its line end (LF). `bytes.split` at one byte is a plain loop in
    CPython 3.11, where a BytesIO's `readlines` finds each line end with memchr, and shares the
    bytes rather than copying them: a third of the time on a 50 KB read of events."""
    return BytesIO(data).readlines()


@dataclass(slots=True)
class SSEEvent:
    """One event. From a decoder that keeps what it read (`SSEDecoder(keep=True)`), `raw` is the
    event's lines as they came (line ends made LF), comments and other fields among them, and
    the blank line that ended it; None when the event was a lone `data: ` line, which
    `encode_data(data)` writes again byte for byte. Such a decoder also hands out what
    dispatches no event (a block of comments, or an `event:` line without data) as an event that
    is not `dispatched`, so that a relay can pass it on. (`feed` only: `feed_data` is for a
    decoder that keeps nothing.)"""

    data: bytes
    event: str = ""
    id: str | None = None
    raw: bytes | None = None
    dispatched: bool = True


class SSEDecoder:
    """Feed bytes, get complete events; lines that are not SSE fields land in `stray`.

    Some servers (MindIE on a mid-stream timeout) write raw text into an event stream; a caller
    that cares reads `stray` after each feed: such lines are reported there instead of dropped.
    """

    __slots__ = ("_bom", "_buf", "_data", "_event", "_has_data", "_id", "_kept", "_pending_cr", "stray")

    def __init__(self, keep: bool = False) -> None:
        self._buf = bytearray()
        self._data: list[bytes] = []
        self._has_data = False
        self._event = ""
        self._id: str | None = None
        self._pending_cr = False
        self._bom = True  # the stream's first bytes may be a UTF-8 BOM, which the spec strips
        self.stray: list[bytes] = []
        # The lines of the event under way, as they came (`keep`): none but in the full rules,
        # which every event with more than its `data:` line goes through.
        self._kept: list[bytes] | None = [] if keep else None

    def between_events(self) -> bool:
        """Nothing of an unfinished event or line is held: the next byte starts an event."""
        return not self._buf and not self._has_data and not self._event and not self._pending_cr and not self._kept

    def take_partial(self) -> bytes:
        """The start of an unfinished event, given back for a caller that cuts events itself: it
        puts these bytes before its next read. Only an unfinished line, unless the decoder keeps
        its events' lines (then those of the event under way, as they came, and the line after
        them). Empty when it holds nothing, or more than that."""
        if self._pending_cr or self._bom or self.stray:
            return b""
        kept = self._kept
        if kept:
            # The lines the event under way came in: what is read of them (its data, its name)
            # is read again when they come back. (An id it named stays the stream's last id, as
            # it is again when they do.)
            held = b"\n".join(kept) + b"\n" + self._buf
            kept.clear()
            self._data = []
            self._has_data = False
            self._event = ""
            self._buf = bytearray()
            return held
        if self._has_data or self._event or not self._buf:
            return b""
        held = bytes(self._buf)
        self._buf = bytearray()
        return held

    def skipped(self) -> None:
        """The caller took whole events from between events itself (they began with a field
        name, so the stream has no BOM to strip)."""
        self._bom = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        return [SSEEvent(e) if type(e) is bytes else e for e in self._scan(chunk, False)]  # type: ignore[misc]

    def feed_data(self, chunk: bytes) -> list[bytes]:
        """Only the events' data: what stream parsers read (they look at no event name or id)."""
        return [e if type(e) is bytes else e.data for e in self._scan(chunk, True)]  # type: ignore[union-attr]

    def _scan(self, chunk: bytes, payloads: bool) -> list[SSEEvent | bytes]:
        """The events completed by `chunk`: the common framing (`data: <payload>` and a blank
        line) as the payload bytes, found by one scan per event; anything else (other fields,
        comments, several data lines, stray text) through the full line-by-line rules."""
        if not chunk or self.stray:
            return []  # (after a line that is no field, nothing more is dispatched)
        if not self._buf and not self._pending_cr and not self._bom and 13 not in chunk:  # no CR
            return self._cut(chunk, payloads)  # nothing held, nothing to normalise: the read as it came
        buf = self._buf
        if self._pending_cr:
            # A CR ended the previous read; an LF right after it belongs to the same line ending.
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf += chunk
        if self._bom:
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                return []  # perhaps a BOM split across reads
            self._bom = False
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
        if 13 in buf:  # a CR (its code: found by memchr)
            # Normalise CRLF and lone CR to LF, but keep a trailing CR until we see what follows it.
            if buf.endswith(b"\r"):
                self._pending_cr = True
                body = bytes(buf[:-1]).replace(b"\r\n", b"\n").replace(b"\r", b"\n") + b"\n"
            else:
                body = bytes(buf).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        else:
            body = bytes(buf)
        return self._cut(body, payloads)

    def _cut(self, body: bytes, payloads: bool) -> list[SSEEvent | bytes]:
        """The events in `body` (LF line ends only), what is left of it held for the next read;
        `payloads`: only their data is read."""
        events: list[SSEEvent | bytes] = []
        start = 0
        kept = self._kept
        if not self._has_data and not self._event and self._id is None and not kept and body.startswith(b"data:"):
            # The usual read: whole events of one `data:` line each, cut in one go (the split
            # pieces are those events exactly when no piece has a second line and each begins
            # with `data:`).
            last = body.rfind(b"\n\n")
            if last > 0:
                pieces = body[:last].split(b"\n\n")
                if line_ends_are(body, last + 1, 2 * len(pieces) - 1) and all(p.startswith(b"data:") for p in pieces):
                    events = [p[6:] if p[5:6] == b" " else p[5:] if kept is None else self._bare(p) for p in pieces]
                    start = last + 2
        if not self._has_data and not self._event and not kept:
            # Between events: whole `data: ...` events are cut out directly, and so are those of
            # an `event:` line and one `data:` line (the named events of Anthropic's and the
            # Responses API's streams).
            # Each line's end found by memchr: a two-byte search is a slow loop in CPython.
            while True:
                nl = body.find(b"\n", start)
                if nl < 0:
                    break
                if body.startswith(b"event:", start):
                    blank = self._named(body, start, nl, events, payloads)
                    if blank < 0:
                        break
                    start = blank + 2
                    continue
                if not body.startswith(b"\n", nl + 1) or not body.startswith(b"data:", start):
                    break  # more than one line (the full rules below), or another field
                if body[start + 5 : start + 6] == b" ":
                    data = body[start + 6 : nl]
                    # (An id seen earlier belongs to this event too; without one, bare bytes do.)
                    events.append(data if self._id is None else SSEEvent(data, "", self._id))
                else:
                    event = self._bare(body[start:nl])
                    if self._id is not None and type(event) is bytes:
                        event = SSEEvent(event, "", self._id)
                    events.append(event)
                start = nl + 2
        end = body.rfind(b"\n")
        if end < start:
            self._buf = bytearray(body[start:])
            return events
        self._buf = bytearray(body[end + 1 :])
        for line in body[start:end].split(b"\n"):
            self._line(line, events)
        return events

    def _named(self, body: bytes, start: int, nl: int, events: list[SSEEvent | bytes], payloads: bool) -> int:
        """The event from `start` (its first line ending at `nl`) into `events` when it is an
        `event:` line and one `data:` line, then a blank line (what the full rules make of it):
        where that blank line is; -1, and nothing added, otherwise."""
        blank = body.find(b"\n", nl + 1)
        if blank < 0 or not body.startswith(b"\n", blank + 1) or not body.startswith(b"data:", nl + 1):
            return -1
        at = nl + 7 if body[nl + 6 : nl + 7] == b" " else nl + 6
        data = body[at:blank]
        if payloads and self._id is None:
            events.append(data)  # the name is not looked at
            return blank
        name = body[start + 7 if body[start + 6 : start + 7] == b" " else start + 6 : nl]
        raw = None if self._kept is None else body[start : blank + 2]
        events.append(SSEEvent(data, name.decode("utf-8", "replace"), self._id, raw))
        return blank

    def _bare(self, line: bytes) -> SSEEvent | bytes:
        """The event of a lone `data:` line without the space: its payload, and (kept) its line."""
        if self._kept is None:
            return line[5:]
        return SSEEvent(line[5:], "", self._id, line + b"\n\n")

    def close(self) -> list[SSEEvent]:
        """End of stream: a final event without its blank line is discarded, per the spec."""
        events: list[SSEEvent | bytes] = []
        if self._buf and not self.stray:
            line = bytes(self._buf)
            self._buf = bytearray()
            self._line(line, events)
        return [e for e in events if isinstance(e, SSEEvent)]

    def _line(self, line: bytes, events: list[SSEEvent | bytes]) -> None:
        kept = self._kept
        if not line:
            raw = None
            if kept:
                raw = b"\n".join(kept) + b"\n\n"
                kept.clear()
            # After a line that is no field the stream is broken there (its reader raises once
            # the events before that line are out): nothing after it is dispatched.
            if self._has_data and not self.stray:
                data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                events.append(SSEEvent(data, self._event, self._id, raw))
            elif raw is not None and not self.stray:
                events.append(SSEEvent(b"", self._event, self._id, raw, dispatched=False))
            self._data = []
            self._has_data = False
            self._event = ""
            return
        if kept is not None:
            kept.append(line)
        if line[0] == 0x3A:  # ":" comment or keep-alive
            return
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name = line[:colon]
            value = line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._has_data = True
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                self._id = value.decode("utf-8", "replace")
        elif name == b"retry":
            pass
        else:
            self.stray.append(line)


def encode_data(payload: bytes, space: bool = True) -> bytes:
    """One `data:` event; `payload` must not contain newlines (JSON from orjson never does)."""
    return (b"data: " if space else b"data:") + payload + b"\n\n"


DONE_FRAME = b"data: [DONE]\n\n"
