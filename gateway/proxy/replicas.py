"""Which replica of a backend to ask, and which to leave out for a while.

Each replica keeps a count of its failures in a row (connect failures, resets, timeouts, 5xx
answers). At `eject_after` of them it is ejected: left out for `eject_base_s`, twice that after
its next failure, and so on up to `eject_max_s`. When its time is up it gets one trial request
(the others still go elsewhere); a success brings it back for good, a failure ejects it again for
longer. Readiness probes count too. Requests start at the next replica in round-robin order
among those taking requests, with the others behind as failover; when every replica is ejected,
the one that failed longest ago is tried first rather than refusing the request.
"""

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

# How long one trial request has to say whether an ejected replica is back; a trial that says
# nothing in that time (its client left) lets another request try.
_TRIAL_S = 30.0
# Called with (replica index, up) whenever a replica is ejected (or its ejection is made longer)
# or comes back.
OnChange = Callable[[int, bool], None]


@dataclass(slots=True)
class _Replica:
    failures: int = 0  # in a row
    ejected_until: float = 0.0  # 0: taking requests
    period: float = 0.0  # the last ejection's length
    last_failure: float = 0.0
    trial_until: float = 0.0  # a trial request is out (until then, at most: it may be cancelled)


def _quiet(replica: int, up: bool) -> None:
    return None


class Replicas:
    __slots__ = ("_clock", "_on_change", "_rr", "_states", "base_s", "eject_after", "max_s", "n")

    def __init__(
        self,
        n: int,
        eject_after: int = 3,
        base_s: float = 5.0,
        max_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: OnChange = _quiet,
    ) -> None:
        self.n = n
        self.eject_after = eject_after
        self.base_s = base_s
        self.max_s = max(max_s, base_s)
        self._clock = clock
        self._on_change = on_change
        self._states = [_Replica() for _ in range(n)]
        self._rr = itertools.count()

    def order(self) -> list[int]:
        """The replicas to try for one request, in order: those taking requests (round-robin
        start), then an ejected one whose time is up (its trial), then, only when nothing else is
        left, the ejected ones by how long ago they failed."""
        if self.n == 1:
            return [0]
        now = self._clock()
        start = next(self._rr) % self.n
        rotated = [(start + k) % self.n for k in range(self.n)]
        states = self._states
        healthy = [i for i in rotated if not states[i].ejected_until]
        trial = [
            i
            for i in rotated
            if states[i].ejected_until and now >= states[i].ejected_until and now >= states[i].trial_until
        ]
        resting = sorted(
            (i for i in rotated if states[i].ejected_until and i not in trial[:1]), key=lambda i: states[i].last_failure
        )
        for i in trial[:1]:
            states[i].trial_until = now + _TRIAL_S
        # A replica whose time is up is tried first: one request finds out whether it is back.
        return trial[:1] + healthy + resting

    def succeeded(self, i: int) -> None:
        s = self._states[i]
        s.failures = 0
        s.trial_until = 0.0
        if s.ejected_until:
            s.ejected_until = 0.0
            s.period = 0.0
            self._on_change(i, True)

    def failed(self, i: int, at_once: bool = False) -> None:
        """A failure of replica i; `at_once` ejects it without waiting for eject_after failures
        (a refused connection is not a fluke)."""
        s = self._states[i]
        now = self._clock()
        s.failures += 1
        s.last_failure = now
        if s.ejected_until:
            # Still failing (its trial, or a request sent when nothing else was left): longer.
            if s.trial_until or now >= s.ejected_until:
                s.period = min(s.period * 2, self.max_s)
                s.ejected_until = now + s.period
                self._on_change(i, False)
            s.trial_until = 0.0
            return
        if at_once or s.failures >= self.eject_after:
            s.period = self.base_s
            s.ejected_until = now + s.period
            s.trial_until = 0.0
            self._on_change(i, False)

    def watch(self, on_change: OnChange) -> None:
        """Have `on_change` told of every ejection and return, and of each replica's state now."""
        self._on_change = on_change
        for i in range(self.n):
            on_change(i, self.up(i))

    def probed(self, i: int, ok: bool) -> None:
        """A readiness probe's outcome feeds the same state as requests do."""
        if ok:
            self.succeeded(i)
        else:
            self.failed(i)

    def up(self, i: int) -> bool:
        return not self._states[i].ejected_until

    def back_in(self, i: int) -> float:
        """Seconds until an ejected replica is next tried (0 when it is up or due a trial)."""
        s = self._states[i]
        return max(s.ejected_until - self._clock(), 0.0) if s.ejected_until else 0.0

    def report(self, i: int) -> dict[str, object]:
        """What /readyz says of a replica's ejection state."""
        s = self._states[i]
        if not s.ejected_until:
            return {"ejected": False, "failures_in_a_row": s.failures}
        return {"ejected": True, "failures_in_a_row": s.failures, "back_in_s": round(self.back_in(i), 1)}
