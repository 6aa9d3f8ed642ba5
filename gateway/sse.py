"""Sans-IO Server-Sent Events: a decoder fed raw bytes that yields events, and byte encoders.

The decoder follows the WHATWG event-stream rules: lines end with CRLF, CR or LF; a field name
is separated from its value by a colon and at most one space; lines starting with a colon are
comments; a blank line dispatches the event. Bytes are kept until a whole line has arrived, so
an event or a UTF-8 character split across reads decodes the same as if it came in one piece.
"""

from dataclasses import dataclass

DONE = b"[DONE]"
_BOM = b"\xef\xbb\xbf"


@dataclass(slots=True)
class SSEEvent:
    data: bytes
    event: str = ""
    id: str | None = None


class SSEDecoder:
    """Feed bytes, get complete events; lines that are not SSE fields land in `stray`.

    Some servers (MindIE on a mid-stream timeout) write raw text into an event stream; a caller
    that cares reads `stray` after each feed: such lines are reported there instead of dropped.
    """

    __slots__ = ("_bom", "_buf", "_data", "_event", "_has_data", "_id", "_pending_cr", "stray")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._data: list[bytes] = []
        self._has_data = False
        self._event = ""
        self._id: str | None = None
        self._pending_cr = False
        self._bom = True  # the stream's first bytes may be a UTF-8 BOM, which the spec strips
        self.stray: list[bytes] = []

    def between_events(self) -> bool:
        """Nothing of an unfinished event or line is held: the next byte starts an event."""
        return not self._buf and not self._has_data and not self._event and not self._pending_cr

    def take_partial(self) -> bytes:
        """The start of an unfinished line, given back when it is all the decoder holds (no
        line of its event is complete yet), for a caller that cuts events itself: it puts
        these bytes before its next read. Empty otherwise."""
        if self._has_data or self._event or self._pending_cr or self._bom or not self._buf:
            return b""
        held = bytes(self._buf)
        self._buf = bytearray()
        return held

    def skipped(self) -> None:
        """The caller took whole events from between events itself (they began with a field
        name, so the stream has no BOM to strip)."""
        self._bom = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        return [SSEEvent(e) if type(e) is bytes else e for e in self._scan(chunk)]  # type: ignore[misc]

    def feed_data(self, chunk: bytes) -> list[bytes]:
        """Only the events' data: what stream parsers read (they look at no event name or id)."""
        return [e if type(e) is bytes else e.data for e in self._scan(chunk)]  # type: ignore[union-attr]

    def _scan(self, chunk: bytes) -> list[SSEEvent | bytes]:
        """The events completed by `chunk`: the common framing (`data: <payload>` and a blank
        line) as the payload bytes, found by one scan per event; anything else (other fields,
        comments, several data lines, stray text) through the full line-by-line rules."""
        if not chunk:
            return []
        if not self._buf and not self._pending_cr and not self._bom and b"\r" not in chunk:
            return self._cut(chunk)  # nothing held, nothing to normalise: the read as it came
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
        if b"\r" in buf:
            # Normalise CRLF and lone CR to LF, but keep a trailing CR until we see what follows it.
            if buf.endswith(b"\r"):
                self._pending_cr = True
                body = bytes(buf[:-1]).replace(b"\r\n", b"\n").replace(b"\r", b"\n") + b"\n"
            else:
                body = bytes(buf).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        else:
            body = bytes(buf)
        return self._cut(body)

    def _cut(self, body: bytes) -> list[SSEEvent | bytes]:
        """The events in `body` (LF line ends only), what is left of it held for the next read."""
        events: list[SSEEvent | bytes] = []
        start = 0
        if not self._has_data and not self._event and self._id is None and body.startswith(b"data:"):
            # The usual read: whole events of one `data:` line each, cut in one go (the split
            # pieces are those events exactly when no piece has a second line and each begins
            # with `data:`).
            last = body.rfind(b"\n\n")
            if last > 0:
                pieces = body[:last].split(b"\n\n")
                if body.count(b"\n", 0, last) == 2 * len(pieces) - 2 and all(p.startswith(b"data:") for p in pieces):
                    events = [p[6:] if p[5:6] == b" " else p[5:] for p in pieces]
                    start = last + 2
        if not self._has_data and not self._event:
            # Between events: whole `data: ...` events are cut out directly.
            while True:
                blank = body.find(b"\n\n", start)
                if blank < 0 or not body.startswith(b"data:", start):
                    break
                nl = body.find(b"\n", start)
                if nl != blank:
                    break  # more than one line: the full rules below
                value = start + (6 if body[start + 5 : start + 6] == b" " else 5)
                data = body[value:blank]
                # (An id seen earlier belongs to this event too; without one, bare bytes do.)
                events.append(data if self._id is None else SSEEvent(data, "", self._id))
                start = blank + 2
        end = body.rfind(b"\n")
        if end < start:
            self._buf = bytearray(body[start:])
            return events
        self._buf = bytearray(body[end + 1 :])
        for line in body[start:end].split(b"\n"):
            self._line(line, events)
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: a final event without its blank line is discarded, per the spec."""
        events: list[SSEEvent | bytes] = []
        if self._buf:
            line = bytes(self._buf)
            self._buf = bytearray()
            self._line(line, events)
        return [e for e in events if isinstance(e, SSEEvent)]

    def _line(self, line: bytes, events: list[SSEEvent | bytes]) -> None:
        if not line:
            # After a line that is no field the stream is broken there (its reader raises once
            # the events before that line are out): nothing after it is dispatched.
            if self._has_data and not self.stray:
                data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                events.append(SSEEvent(data, self._event, self._id))
            self._data = []
            self._has_data = False
            self._event = ""
            return
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


DONE_FRAME = b"data: [DONE]\n\n"
