"""A stream's events on their way to the client: read with a limit on silence (`Paced`, for
a renderer that pings), rendered and written as they come (`relay`), and what came once the
backend's answer had all come kept back to go out with the stream's end; a stream whose whole
answer came at once, rendered whole (`rendered`)."""

import asyncio
from typing import Any

from aiohttp import web

from gateway.codec.capabilities import Ends, Pings, has
from gateway.codec.contract import EventStream, StreamRenderer
from gateway.neutral.errors import GatewayError, UpstreamError
from gateway.neutral.events import Event
from gateway.proxy.observe import Exchange

# What a paced stream's next read is when the backend said nothing for a while.
SILENCE: list[Event] = []


class Paced:
    """A stream read with a limit on silence, for a renderer that `Pings`: `next` gives SILENCE
    when the backend said nothing for `every` seconds, and the next `next` reads on.

    One timer a stream, not one a read (a fast stream's reads come a millisecond apart): it is
    set for `every` after the last read, and when it comes while a read has waited that long, it
    interrupts the read (the streams below take up an interrupted read again, as nothing of it
    was taken); otherwise it is set again for the rest of the silence."""

    __slots__ = ("_ends", "_every", "_last", "_loop", "_reading", "_silent", "_stream", "_task", "_timer")

    def __init__(self, stream: EventStream, every: float, task: "asyncio.Task[Any]") -> None:
        self._stream = stream
        self._ends: Ends | None = stream if has(stream, Ends) else None  # asked at each read: found once
        self._every = every
        self._task = task
        self._loop = task.get_loop()
        self._last = self._loop.time()
        self._timer: asyncio.TimerHandle | None = None
        self._reading = False
        self._silent = False

    @property
    def ended(self) -> bool:
        return self._ends is not None and self._ends.ended

    async def next(self) -> list[Event] | None:
        if self.ended:
            return await self._stream.next()  # what is left comes without a wait
        if self._timer is None:
            self._timer = self._loop.call_at(self._last + self._every, self._due)
        self._reading = True
        try:
            events = await self._stream.next()
        except asyncio.CancelledError:
            if not self._silent:
                raise
            self._silent = False
            if self._task.uncancel():
                raise  # cancelled for another reason as well: the client left, or a deadline
            events = SILENCE
        finally:
            self._reading = False
        self._last = self._loop.time()
        return events

    def _due(self) -> None:
        self._timer = None
        if self._reading and self._loop.time() - self._last >= self._every:
            self._silent = True
            self._task.cancel()
        elif self._reading:
            self._timer = self._loop.call_at(self._last + self._every, self._due)

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self._stream.aclose()


async def relay(
    resp: web.StreamResponse, stream: EventStream, renderer: StreamRenderer, first: list[Event] | None, ex: Exchange
) -> bytes:
    """The stream's events, rendered and written as they come, up to its end (with a ping in
    each silence, for a renderer that pings). What came once the backend's answer had all come
    (`Ends`) is not written but given back, to go out with the stream's end in one write."""
    out = renderer.start()
    if first is SILENCE:
        assert has(renderer, Pings)
        out += renderer.ping()
    elif first:
        ex.observe(first)
        out += renderer.render(first)
    if first is None:
        return out
    if not out:
        await resp.write(b"")  # the head goes now, without waiting for events that render
    ending = stream if has(stream, Ends) else None  # asked after each read: found once
    while True:
        if out and not (ending is not None and ending.ended):
            await resp.write(out)
            out = b""
        try:
            events = await stream.next()
        except GatewayError:
            if out:
                await resp.write(out)  # what came before the fault goes out before its error
            raise
        if events is None:
            return out
        if events is SILENCE:
            assert has(renderer, Pings)
            out += renderer.ping()
            continue
        ex.observe(events)
        out += renderer.render(events)


def fault_tail(renderer: StreamRenderer, e: GatewayError, ex: Exchange) -> bytes:
    """A stream's end after a fault once its head went out: the error in-band, then the end."""
    if isinstance(e, UpstreamError):
        ex.upstream_error = e.upstream_class.value
    return renderer.error(e) + renderer.end()


async def rendered(
    stream: EventStream, renderer: StreamRenderer, first: list[Event], ex: Exchange
) -> tuple[list[bytes], bool]:
    """A stream whose backend's answer has all come (`Ends`), rendered whole, in parts (a fault in
    what is left, in-band as it would be streamed); whether it ended without one."""
    out = [renderer.start()]
    events: list[Event] | None = first
    try:
        while events is not None:
            ex.observe(events)
            out.append(renderer.render(events))
            events = await stream.next()
    except GatewayError as e:
        out.append(fault_tail(renderer, e, ex))
        whole = False
    else:
        out.append(renderer.end())
        whole = True
    return [part for part in out if part], whole
