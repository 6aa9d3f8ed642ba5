"""Content codings of answer bodies: gzip and deflate, decoded in bounded pieces.

The gateway asks backends for `identity`; these are for a backend that compresses anyway. A
piece is at most `PIECE` bytes however far a small input expands (a gzip bomb), so whoever reads
decides when to stop.
"""

import zlib

from gateway.upstream.faults import BadAnswer

PIECE = 1024 * 1024
CODINGS = ("gzip", "x-gzip", "deflate")


class Decoder:
    """One body's decompressor: `feed` the encoded bytes as they come, then `more` while
    `pending`, and `end` once they are all in."""

    __slots__ = ("_coding", "_fed", "_z")

    def __init__(self, coding: str) -> None:
        if coding not in CODINGS:
            raise BadAnswer(
                "answered in a content coding the gateway does not decode", detail=f"Content-Encoding: {coding[:40]!r}"
            )
        self._coding = coding
        self._fed = False
        # deflate: which of its two forms (zlib-wrapped or raw) shows in its first byte.
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS) if coding != "deflate" else None

    @property
    def pending(self) -> bool:
        return self._z is not None and bool(self._z.unconsumed_tail)

    def feed(self, data: bytes) -> bytes:
        if data:
            self._fed = True
        z = self._z
        if z is None:
            if not data:
                return b""
            # A zlib stream's first byte says compression method 8 (deflate) in its low bits.
            z = self._z = zlib.decompressobj(zlib.MAX_WBITS if data[0] & 0x0F == 8 else -zlib.MAX_WBITS)
        try:
            return z.decompress(data, PIECE)
        except zlib.error:
            raise BadAnswer(f"sent a body that does not decode as {self._coding}") from None

    def more(self) -> bytes:
        assert self._z is not None
        return self.feed(self._z.unconsumed_tail)

    def end(self) -> bytes:
        """What the decompressor still holds; BadAnswer when the encoded body stopped short."""
        z = self._z
        if z is None or not self._fed:
            return b""  # an empty body is empty in any coding
        try:
            out = z.flush()
        except zlib.error:
            raise BadAnswer(f"sent a body that does not decode as {self._coding}") from None
        if not z.eof:
            raise BadAnswer(f"sent a {self._coding} body that stops short of its end")
        return out
