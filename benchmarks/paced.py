"""The paced upstream: the stub's streams, one event per socket write, a fixed gap apart.

nginx hands a whole stream over at once (sendfile), so a proxy in front of it reads a stream in a
few large pieces. A model server writes one event per token, a few milliseconds apart, and then
a proxy pays one read, one parse and one write per event. This server does what the model
server does, so that the CPU a proxy spends per streamed event can be measured.

It serves every file under WWW/stream (the stub's stream answers, stub.write_files) at its own
URL path, to POST or GET alike; anything else is a 404. Each answer is chunked, one event per
chunk and per write, `GAP_MS` apart (default 1); the first event goes with the headers.

    .venv/bin/python benchmarks/paced.py PORT WWW [GAP_MS]

A raw asyncio protocol on uvloop, HTTP/1.1 keep-alive, request bodies by Content-Length only: it
runs on the load generator's core, and must cost little there. One timer per stream in flight.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import cast

import uvloop

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
_END = b"0\r\n\r\n"


def load_streams(www: Path) -> dict[str, list[bytes]]:
    """URL path -> its events, each already framed as one HTTP chunk."""
    streams: dict[str, list[bytes]] = {}
    for f in sorted((www / "stream").rglob("*")):
        if f.is_file():
            events = [e + b"\n\n" for e in f.read_bytes().split(b"\n\n") if e.strip()]
            streams["/" + f.relative_to(www).as_posix()] = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    return streams


class Paced(asyncio.Protocol):
    """One client connection: requests one after another, each answered by a paced stream."""

    def __init__(self, streams: dict[str, list[bytes]], gap_s: float) -> None:
        self.streams = streams
        self.gap_s = gap_s
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.events: list[bytes] | None = None  # the stream being sent, if any
        self.next_event = 0
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._serve_next()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.transport = None

    def _serve_next(self) -> None:
        # A request that arrives while a stream is being sent waits for its end (clients do not
        # pipeline, but nothing is lost if one does).
        while self.events is None and self.transport is not None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.buf[:end].split(b"\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            parts = lines[0].split(b" ")
            events = self.streams.get(parts[1].decode("latin-1")) if len(parts) == 3 else None
            if events is None:
                self.transport.write(_NOT_FOUND)
                continue
            self.events, self.next_event = events, 0
            self._send(_HEAD)

    def _send(self, head: bytes = b"") -> None:
        """The next event; the headers go with the first, the terminating chunk with the last."""
        self.timer = None
        if self.transport is None or self.events is None:
            return
        event = self.events[self.next_event]
        self.next_event += 1
        if self.next_event < len(self.events):
            self.transport.write(head + event)
            self.timer = self.loop.call_later(self.gap_s, self._send)
        else:
            self.transport.write(head + event + _END)
            self.events = None
            self._serve_next()


async def main(port: int, www: Path, gap_ms: float) -> None:
    streams = load_streams(www)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Paced(streams, gap_ms / 1000), "127.0.0.1", port, backlog=1024)
    print(f"listening on http://127.0.0.1:{port} ({len(streams)} streams, {gap_ms:g} ms apart)", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 1.0))
