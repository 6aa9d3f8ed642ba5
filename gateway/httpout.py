"""The gateway's answers on the wire, written with fewer steps and sends than aiohttp's own.

aiohttp's answers go through its general machinery: a header multidict filled field by field;
checks for compression, chunking and cookies; a serializer; a buffered writer that frames each
piece of a stream and asks itself again at each write what it was told at the start. For a JSON
answer relayed as it came that was about a twentieth of the gateway's instructions a request,
and for a paced stream a microsecond an event. Here an answer's head is made once, from the
same rules, and each write is one format and one send:

- `WholeAnswer`: status, headers and body all known before any goes out, written as one (a long
  body's parts beside the head, not copied into one buffer).
- `StreamAnswer`: a chunked stream (to an HTTP/1.0 client, its body as it comes and the
  connection closed after), its head kept back to go out with its first write.

Both write the bytes aiohttp's `web.Response` and `web.StreamResponse` would (tests/test_httpout.py
holds them equal, byte for byte, for each method, HTTP version, connection wish and status the
gateway answers with). Neither sends an `on_response_prepare` signal: the gateway's apps have
none (that test holds them to it).

With gateway/protocol.py, this is where the gateway sets members aiohttp keeps to itself: an
answer's final keep-alive (which the server reads to keep the connection or close it), that its
end was sent, its body's length, its request and writer while it streams.
"""

from collections.abc import Mapping

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.helpers import must_be_empty_body, rfc822_formatted_time, should_remove_content_length
from aiohttp.http import SERVER_SOFTWARE, HttpVersion, HttpVersion10, HttpVersion11

_SERVER = f"Server: {SERVER_SOFTWARE}"
_STATUS_LINES: dict[tuple[HttpVersion, int], str] = {}
# A body shorter than this is copied after the head, one buffer for the socket; a longer one is
# written beside it (the socket takes both in one call), not copied.
_JOIN_BELOW = 16 * 1024
# What may wait in the socket's buffer before a write waits for the client to take some in.
_DRAIN_ABOVE = 64 * 1024


def _head(resp: web.StreamResponse, request: web.BaseRequest, size: int | None) -> tuple[bytes, bool, bool]:
    """An answer's head (of `size` bytes of body, or None: streamed), whether the connection stays
    open after it, and whether its body must be left out: aiohttp's rules for Content-Length or
    chunking, Content-Type, Date, Server and Connection, its fields in aiohttp's order."""
    method, status, headers = request.method, resp.status, resp.headers
    keep_alive = resp.keep_alive
    if keep_alive is None:
        keep_alive = request.keep_alive
    empty = must_be_empty_body(method, status)
    version = request.version
    line = _STATUS_LINES.get((version, status))
    if line is None:
        # The reason is its status's own (these answers are given no other).
        line = _STATUS_LINES[version, status] = f"HTTP/{version[0]}.{version[1]} {status} {resp.reason}"
    lines = [line]
    if headers:
        given = "\r\n".join(map(": ".join, headers.items()))
        # A CR or LF in a name or a value would start a field the answer did not mean to have.
        if given.count("\n") != len(headers) - 1 or given.count("\r") != len(headers) - 1:
            raise ValueError("a CR or LF in a header field of the answer")
        lines.append(given)
    if size is None:
        if not empty:
            if version == HttpVersion11:
                lines.append("Transfer-Encoding: chunked")
            else:
                keep_alive = False  # an HTTP/1.0 client learns where the body ends when it closes
    elif hdrs.CONTENT_LENGTH not in headers:
        # A bodiless answer to HEAD, or a 304, does not say the length of what it lacks.
        sized = size or (status != 304 and method != hdrs.METH_HEAD)
        if sized and not (empty and should_remove_content_length(method, status)):
            lines.append(f"Content-Length: {size}")
    if not empty and size != 0 and hdrs.CONTENT_TYPE not in headers:
        lines.append("Content-Type: application/octet-stream")
    if hdrs.DATE not in headers:
        lines.append("Date: " + rfc822_formatted_time())
    if hdrs.SERVER not in headers:
        lines.append(_SERVER)
    if hdrs.CONNECTION not in headers:
        if keep_alive and version == HttpVersion10:
            lines.append("Connection: keep-alive")
        elif not keep_alive and version == HttpVersion11:
            lines.append("Connection: close")
    lines.append("\r\n")
    return "\r\n".join(lines).encode(), keep_alive, empty


def _put(request: web.BaseRequest, parts: list[bytes | bytearray | memoryview], size: int) -> bool:
    """`parts` written to the client in one send: joined, or, past `_JOIN_BELOW` bytes of body
    (`size`), handed over side by side; whether the socket's buffer is full enough that the
    writer should wait for the client to take some in."""
    transport = request.transport
    if transport is None or transport.is_closing():
        raise ConnectionResetError("Cannot write to closing transport")
    if size < _JOIN_BELOW:
        piece = b"".join(parts)
        if piece:
            transport.write(piece)
    else:
        transport.writelines(parts)
    return transport.get_write_buffer_size() > _DRAIN_ABOVE


class WholeAnswer(web.StreamResponse):
    """An answer of `body` (bytes, or its parts in order), its head made and written with it:
    in one write, or a long body's parts beside the head without being joined to it."""

    def __init__(
        self, body: bytes | list[bytes], *, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(status=status, headers=headers)
        self._parts = [body] if isinstance(body, bytes) else body
        self._size = sum(map(len, self._parts))

    @property
    def body(self) -> bytes:
        return b"".join(self._parts)

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self.prepared:
            return None
        head, keep_alive, empty = _head(self, request, self._size)
        full = _put(request, [head] if empty else [head, *self._parts], 0 if empty else self._size)
        self._keep_alive = keep_alive
        self._eof_sent = True
        self._body_length = 0 if empty else self._size
        if full:
            await request.writer.drain()
        return None


class StreamAnswer(web.StreamResponse):
    """A streamed answer, its head kept back to go out with its first write (`write(b"")` sends
    it alone), each piece framed and written in one send."""

    _pending = b""  # the head, until the first write takes it
    _framed = True
    _empty = False

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self.prepared:
            return None
        self._pending, keep_alive, self._empty = _head(self, request, None)
        self._keep_alive = keep_alive
        self._framed = request.version == HttpVersion11 and not self._empty
        self._req = request
        self._payload_writer = writer = request.writer  # prepared, as aiohttp tells it
        return writer

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._eof_sent:
            raise RuntimeError("Cannot call write() after write_eof()")
        if self._req is None:
            raise RuntimeError("Cannot call write() before prepare()")
        await self._send(data, b"")

    async def write_eof(self, data: bytes | bytearray | memoryview = b"") -> None:
        if self._eof_sent:
            return
        if self._req is None:
            raise RuntimeError("Cannot call write_eof() before prepare()")
        await self._send(data, b"0\r\n\r\n" if self._framed else b"")
        self._eof_sent = True
        self._req = self._payload_writer = None

    async def _send(self, data: bytes | bytearray | memoryview, end: bytes) -> None:
        request = self._req
        assert request is not None
        if self._empty:
            data = b""
        size = len(data)
        parts: list[bytes | bytearray | memoryview]
        if self._framed and size:
            parts = [self._pending, b"%x\r\n" % size, data, b"\r\n", end]
        else:
            parts = [self._pending, data, end]
        full = _put(request, parts, size)
        self._pending = b""
        self._body_length += size
        if full:
            await request.writer.drain()
