"""Reading a backend's answer body whole, within a bound on its size.

`resp.content.read(n)` gives what has arrived so far, up to n bytes: an answer that comes in
two TCP segments would be cut at the first. `resp.read()` waits for the whole body, however
large it is, and holds it (a compressed body, once decoded, may be far larger than its
Content-Length). Every read of a backend answer's body goes through here instead.
"""

import asyncio

import aiohttp

MAX_ERROR_BODY = 64 * 1024  # an error answer is read for its message; the rest is cut
MAX_INFO_BODY = 1024 * 1024  # a model list, a model's metadata, a health document
# A body already all there (decoded from a small compressed one) is read without waiting on
# the socket, so without a turn of the event loop: one is given every this many bytes.
YIELD_EVERY = 1024 * 1024


async def read_whole(resp: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The answer's body, decoded; None when it is larger than `limit` bytes. Then nothing more
    is read and nothing is kept, and the caller must not pool the connection (aiohttp's
    `release` closes one whose body is unread)."""
    length = resp.content_length
    if length is not None and "Content-Encoding" not in resp.headers:
        # The parser holds the body to its Content-Length.
        return await resp.read() if length <= limit else None
    chunks, size = await _chunks(resp.content, limit + 1)
    return None if size > limit else b"".join(chunks)


async def read_prefix(resp: aiohttp.ClientResponse, n: int) -> bytes:
    """The body's first `n` bytes (all of it, when shorter), waited for as they come."""
    chunks, _ = await _chunks(resp.content, n)
    return b"".join(chunks)[:n]


async def _chunks(content: aiohttp.StreamReader, n: int) -> tuple[list[bytes], int]:
    """The body's chunks as they come, until the end or until they hold `n` bytes or more, and
    how many bytes they hold."""
    chunks: list[bytes] = []
    size = 0
    turn = YIELD_EVERY
    while size < n and (chunk := await content.readany()):
        chunks.append(chunk)
        size += len(chunk)
        if size >= turn:
            turn += YIELD_EVERY
            await asyncio.sleep(0)
    return chunks, size
