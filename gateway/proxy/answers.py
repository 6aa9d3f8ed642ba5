"""A backend's answer as the engine takes it: the errors a bad one is, and a stream read event by
event, within the answer bound (`limits.max_answer_bytes`), ended or cut when its reader is done.
"""

import asyncio
import time

from gateway import jsonutil
from gateway.codec.contract import StreamParser
from gateway.neutral.errors import GatewayError, UpstreamClass, UpstreamError, UpstreamTimeout
from gateway.neutral.events import Event
from gateway.proxy.plan import UpstreamTimes
from gateway.proxy.routing import Backend
from gateway.upstream import YIELD_EVERY, Answer, Fault

# What a codec raises on an answer that is not what its dialect says.
READ_FAULTS = (jsonutil.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, IndexError)


def malformed(backend: Backend, what: str, kind: UpstreamClass = UpstreamClass.PROTOCOL) -> UpstreamError:
    return UpstreamError(f"backend {backend.name!r} sent a malformed {what}", upstream_class=kind)


def too_large(backend: Backend, limit: int, what: str, kind: UpstreamClass) -> UpstreamError:
    return UpstreamError(
        f"backend {backend.name!r} sent {what} larger than the gateway takes ({limit} bytes: limits.max_answer_bytes)",
        upstream_class=kind,
    )


class AnswerStream:
    """A backend's event stream through its dialect's parser: each `next` is the events of the
    next read that completes any. Closing it before the end cuts the connection."""

    __slots__ = ("_backend", "_done", "_limit", "_parser", "_resp", "_span", "_times")

    def __init__(
        self,
        backend: Backend,
        resp: Answer,
        parser: StreamParser,
        times: UpstreamTimes,
        span: int,
        limit: int,
    ) -> None:
        self._backend = backend
        self._resp = resp
        self._parser = parser
        self._times = times
        self._span = span
        self._limit = limit
        self._done = False

    async def next(self) -> list[Event] | None:
        if self._done:
            return None
        resp = self._resp
        # Bytes read since the last event: what the parser may be holding of an unfinished one.
        # (An event ends in the read that returns it, so at most that read's tail is carried over.)
        held = 0
        try:
            while True:
                chunk = await resp.chunk()
                if not chunk:
                    self._done = True
                    self._times.ended(self._span, time.perf_counter())
                    return self._parser.close() or None
                events = self._parser.feed(chunk)
                if events:
                    return events
                held += len(chunk)
                if held > self._limit:
                    raise too_large(self._backend, self._limit, "a stream event", UpstreamClass.MIDSTREAM)
                if held // YIELD_EVERY != (held - len(chunk)) // YIELD_EVERY:
                    await asyncio.sleep(0)  # a long event already all there would hold the loop
        except TimeoutError:
            raise UpstreamTimeout(
                f"backend {self._backend.name!r} sent nothing for {self._backend.conf.timeout_s:g}s",
                upstream_class=UpstreamClass.MIDSTREAM,
            ) from None
        except Fault:
            raise UpstreamError(
                f"backend {self._backend.name!r} broke off the stream", upstream_class=UpstreamClass.MIDSTREAM
            ) from None
        except GatewayError:
            raise
        except READ_FAULTS:
            raise malformed(self._backend, "stream event", UpstreamClass.MIDSTREAM) from None

    async def aclose(self) -> None:
        self._times.ended(self._span, time.perf_counter())
        if self._done:
            self._resp.release()
            return
        self._done = True
        # close(), not release(): an unfinished upstream stream must be cut, so the backend stops.
        self._resp.close()
