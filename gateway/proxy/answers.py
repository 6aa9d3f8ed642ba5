"""A backend's answer as the engine takes it: the errors a bad one is, and a stream read event by
event, within the answer bounds (`limits.max_answer_bytes` for one, `max_buffered_answer_bytes`
for all together), ended or cut when its reader is done.
"""

import asyncio
import logging
import time

from gateway import jsonutil
from gateway.codec.contract import StreamParser
from gateway.neutral.errors import GatewayError, UpstreamClass, UpstreamError, UpstreamTimeout
from gateway.neutral.events import Event
from gateway.proxy.plan import UpstreamTimes
from gateway.proxy.routing import Backend
from gateway.upstream import YIELD_EVERY, Answer, AnswerBudget, Broken, Fault, OverBudget, ReadTimeout, shown_url

log = logging.getLogger("gateway")

# What a codec raises on an answer that is not what its dialect says.
READ_FAULTS = (jsonutil.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, IndexError)


def malformed(backend: Backend, what: str, kind: UpstreamClass = UpstreamClass.PROTOCOL) -> UpstreamError:
    return UpstreamError(f"backend {backend.name!r} sent a malformed {what}", upstream_class=kind)


def too_large(backend: Backend, limit: int, what: str, kind: UpstreamClass) -> UpstreamError:
    return UpstreamError(
        f"backend {backend.name!r} sent {what} larger than the gateway takes ({limit} bytes: limits.max_answer_bytes)",
        upstream_class=kind,
    )


def over_budget(backend: Backend, budget: AnswerBudget, kind: UpstreamClass) -> UpstreamError:
    return UpstreamError(
        f"backend {backend.name!r} sent an answer larger than the room the gateway has left for answers "
        f"({budget.limit} bytes for all at once: limits.max_buffered_answer_bytes)",
        upstream_class=kind,
    )


def fault_error(backend: Backend, fault: Fault, timed_out: str, kind: UpstreamClass | None = None) -> UpstreamError:
    """The error a transport fault is for the client, in the gateway's words (`timed_out`: what
    a ReadTimeout means where it came). Its class is what happened, unless `kind` says where
    (a stream that had begun)."""
    if isinstance(fault, ReadTimeout):
        return UpstreamTimeout(f"backend {backend.name!r} {timed_out}", upstream_class=kind)
    cls = kind or (UpstreamClass.CLOSED if isinstance(fault, Broken) else UpstreamClass.PROTOCOL)
    return UpstreamError(f"backend {backend.name!r} {fault}", upstream_class=cls)


def logged(backend: Backend, replica: int, err: UpstreamError, cause: BaseException | None = None) -> UpstreamError:
    """`err`, once it is logged with its cause: the one WARNING its fault gets."""
    if isinstance(cause, Fault):
        detail = cause.detail
    else:
        detail = f"{type(cause).__name__}: {cause}" if cause is not None else err.detail
    what = err.message.removeprefix(f"backend {backend.name!r} ")
    url = shown_url(backend.urls[replica])
    log.warning("backend %s: replica %d (%s) %s%s", backend.name, replica, url, what, f": {detail}" if detail else "")
    return err


class AnswerStream:
    """A backend's event stream through its dialect's parser: each `next` is the events of the
    next read that completes any. Closing it before the end cuts the connection."""

    __slots__ = ("_backend", "_budget", "_done", "_limit", "_parser", "_replica", "_resp", "_span", "_times")

    def __init__(
        self,
        backend: Backend,
        replica: int,
        resp: Answer,
        parser: StreamParser,
        times: UpstreamTimes,
        span: int,
        limit: int,
        budget: AnswerBudget,
    ) -> None:
        self._backend = backend
        self._replica = replica
        self._resp = resp
        self._parser = parser
        self._times = times
        self._span = span
        self._limit = limit
        self._budget = budget
        self._done = False

    @property
    def ended(self) -> bool:
        return self._done or self._resp.ended

    async def next(self) -> list[Event] | None:
        if self._done:
            return None
        resp = self._resp
        # Bytes read since the last event: what the parser may be holding of an unfinished one.
        # (An event ends in the read that returns it, so at most that read's tail is carried over.)
        # Past a step of them they hold room in the budget for all answers, until the event ends.
        held = taken = 0
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
                    raise self._fault(too_large(self._backend, self._limit, "a stream event", UpstreamClass.MIDSTREAM))
                if held // YIELD_EVERY != (held - len(chunk)) // YIELD_EVERY:
                    self._budget.take(held - taken)
                    taken = held
                    await asyncio.sleep(0)  # a long event already all there would hold the loop
        except Fault as e:
            timed_out = f"sent nothing for {self._backend.conf.timeout_s:g}s"
            raise self._fault(fault_error(self._backend, e, timed_out, UpstreamClass.MIDSTREAM), e) from None
        except OverBudget:
            raise self._fault(over_budget(self._backend, self._budget, UpstreamClass.MIDSTREAM)) from None
        except GatewayError as e:
            if isinstance(e, UpstreamError) and e.detail:
                self._fault(e)  # the backend sent what the client is not shown
            raise
        except READ_FAULTS as e:
            raise self._fault(malformed(self._backend, "stream event", UpstreamClass.MIDSTREAM), e) from None
        finally:
            if taken:
                self._budget.give(taken)

    def _fault(self, err: UpstreamError, cause: BaseException | None = None) -> UpstreamError:
        return logged(self._backend, self._replica, err, cause)

    async def aclose(self) -> None:
        self._times.ended(self._span, time.perf_counter())
        if self._done:
            self._resp.release()
            return
        self._done = True
        # close(), not release(): an unfinished upstream stream must be cut, so the backend stops.
        self._resp.close()
