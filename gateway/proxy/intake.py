"""What a client request must pass before the exchange reads it: its API key, and its body.

The body is read whole, within the size limit and the body deadline, with room reserved for it
in the gateway-wide body budget before a byte is read. A body that did not come with its headers
is also held to a minimum rate once its grace is over, and counts against its client's share of
bodies on their way. A client that waits to be asked for its body (`Expect: 100-continue`) is
asked only then, once its headers have passed every check before the body, so that one refused
(a missing key, a declared size over the limit, a limit reached) gets its error without sending
a body no one would read.
"""

import asyncio
from collections.abc import Mapping, Sequence

from aiohttp import HttpVersion11, web
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestPayloadError

from gateway.codec.capabilities import BEARER, KeyHeader
from gateway.config import Limits
from gateway.neutral.errors import InvalidRequest, PayloadTooLarge, RequestTimeout, Unauthorized
from gateway.proxy.admission import Budget, Ticket
from gateway.proxy.peers import Arrival, Network


def check_auth(
    request: web.Request, keys: Mapping[str, str] | None, where: Sequence[KeyHeader] = (BEARER,)
) -> str | None:
    """The key's log name (None when auth is off: `keys` None); Unauthorized unless the request
    carries one of the configured keys in one of the headers its dialect's clients use."""
    if keys is None:
        return None
    for place in where:
        header = request.headers.get(place.header)
        if header is None:
            continue
        if place.scheme:
            scheme, _, header = header.partition(" ")
            if scheme.lower() != place.scheme.lower():
                continue
        name = keys.get(header.strip())
        if name is not None:
            return name
    raise Unauthorized("Missing or invalid API key", code="invalid_api_key")


async def read_body(
    request: web.Request, arrival: Arrival, limits: Limits, budget: Budget, ticket: Ticket, trusted: Sequence[Network]
) -> bytes:
    """The whole body, within the size limit and the body deadline, its room in the budget
    reserved (on `ticket`) before a byte is read; one still on its way counts against its client
    (who `trusted` proxies say it is) until it is whole."""
    limit = limits.max_body_bytes
    too_large = f"Request body is larger than the limit of {limit} bytes"
    length = request.content_length
    if length is not None and length > limit:
        raise PayloadTooLarge(too_large)
    room = limit if length is None else length
    content = request.content
    try:
        if content.is_eof():
            budget.reserve_body(ticket, room)
            # It came with the headers: taken as it lies, not through a read loop that copies it
            # into a growing buffer and then out again.
            body = content.read_nowait()
            if len(body) > limit:
                raise PayloadTooLarge(too_large)
        else:
            with budget.arrival(arrival.client(trusted)):
                budget.reserve_body(ticket, room)
                body = await _arrival(request, limits)
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(too_large) from None
    except RequestPayloadError:
        raise _undecodable() from None
    if not body and request.body_exists and content.total_raw_bytes:
        # aiohttp ends a gzip body cut short without a word (only deflate's end is checked): the
        # bytes sent decoded to nothing, which is not "an empty body".
        raise _undecodable()
    budget.settle_body(ticket, len(body))
    return body


async def _arrival(request: web.Request, limits: Limits) -> bytes:
    """A body that did not come with its headers, asked for if the client waits to be (only
    100-continue gets this far: `continue_later`), within the body deadline and at the minimum
    rate."""
    if request.version == HttpVersion11 and "Expect" in request.headers:
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer's own size is what is counted and logged
    deadline = limits.client_body_timeout_s
    try:
        async with asyncio.timeout(deadline) as timeout:
            pace = _Pace(request.content, limits.min_body_rate_bytes_s, limits.body_rate_grace_s, timeout)
            try:
                return await request.read()
            finally:
                pace.stop()
    except TimeoutError:
        if pace.lagging:
            rate = limits.min_body_rate_bytes_s
            raise RequestTimeout(f"The request body came slower than the minimum of {rate} bytes a second") from None
        raise RequestTimeout(f"The request body did not arrive within {deadline:g}s") from None


class _Pace:
    """A body's minimum rate, looked at every `every` seconds from its headers on: each such
    stretch must have brought `rate` bytes a second, or the read is ended through `timeout`. So
    a body may come at any pace for the first stretch (its grace), and one that stalls for two
    stretches, or trickles, is cut; a body that keeps up costs a timer now and then."""

    __slots__ = ("_content", "_every", "_handle", "_quota", "_seen", "_timeout", "lagging")

    def __init__(self, content: StreamReader, rate: int, every: float, timeout: asyncio.Timeout) -> None:
        self._content = content
        self._every = every
        self._quota = rate * every
        self._seen = 0
        self._timeout = timeout
        self._handle = asyncio.get_running_loop().call_later(every, self._look)
        self.lagging = False

    def _look(self) -> None:
        seen = self._content.total_raw_bytes
        if seen - self._seen < self._quota:
            self.lagging = True
            self._timeout.reschedule(asyncio.get_running_loop().time())
        else:
            self._seen = seen
            self._handle = asyncio.get_running_loop().call_later(self._every, self._look)

    def stop(self) -> None:
        self._handle.cancel()


async def continue_later(request: web.Request) -> web.StreamResponse | None:
    """aiohttp's hook for a request's `Expect` header, on the inference paths (aiohttp's own
    would ask for the body before any check): `100-continue` waits for `read_body`; any other
    expectation cannot be met (417)."""
    expect = request.headers.get("Expect", "")
    if expect.lower() == "100-continue":
        return None
    text = f"Expectation Failed: the gateway meets only 100-continue, not {expect!r}"
    return web.json_response({"error": text}, status=417)


def _undecodable() -> InvalidRequest:
    return InvalidRequest(
        "The request body could not be read: it does not decode as its Content-Encoding says, or it broke off",
        code="invalid_body",
    )
