"""The last minute of a few Prometheus series, for the status page: samples taken every second
while someone is looking, and what they say about the time between (how much a counter grew, a
gauge's values, a histogram's quantiles).

Nothing here is on the request path. A sample copies values prometheus-client already keeps;
it is read in a thread (`asyncio.to_thread`), so the event loop waits for no file or lock, and
only its few hundred numbers are filed on the loop. Sampling starts when the page first asks
(`Recent.watched`) and stops LINGER_S after it last asked: a gateway nobody watches does none of it.

A sample holds one float per series in a flat array, the series numbered as they first appear;
a series missing from a sample (not there yet, or gone) is NaN there.
"""

import asyncio
import contextlib
import itertools
import math
import time
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from prometheus_client.metrics_core import Metric

Labels = tuple[tuple[str, str], ...]
Row = tuple[str, Labels, float]
NAN = math.nan
# How long sampling goes on after the page last asked for the state.
LINGER_S = 300.0


class Recent:
    """Samples of the series named `keep` (sample names, such as `gateway_requests_total`) from
    `read` (run in a thread; `prepare` runs on the loop first) every `interval_s`, over the last
    `window_s` seconds and one sample more, so that the window is whole."""

    def __init__(
        self,
        keep: Iterable[str],
        read: Callable[[], Iterable[Metric]],
        prepare: Callable[[], None],
        window_s: float = 60.0,
        interval_s: float = 1.0,
    ) -> None:
        self.keep = frozenset(keep)
        self.window_s = window_s
        self.interval_s = interval_s
        self._read = read
        self._prepare = prepare
        self._index: dict[tuple[str, Labels], int] = {}
        self._by_name: dict[str, list[tuple[Labels, int]]] = {}
        self.times: deque[float] = deque()
        self._values: deque[array[float]] = deque()
        self._task: asyncio.Task[None] | None = None
        self._asked = 0.0

    # Sampling

    async def watched(self) -> None:
        """The page asked: sample until LINGER_S after the last ask, starting now if not yet."""
        self._asked = time.monotonic()
        if self._task is None or self._task.done():
            self.clear()
            self._task = asyncio.create_task(self._sampling())
        if not self.times:
            await self.sample()

    async def _sampling(self) -> None:
        while time.monotonic() - self._asked < LINGER_S:
            await asyncio.sleep(self.interval_s)
            await self.sample()
        self.clear()

    async def sample(self) -> None:
        """One sample, now."""
        self._prepare()
        rows = await asyncio.to_thread(self._rows)
        self.add(rows, time.time())

    def _rows(self) -> list[Row]:
        return [
            (s.name, tuple(sorted(s.labels.items())), s.value)
            for family in self._read()
            for s in family.samples
            if s.name in self.keep
        ]

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # The window

    def clear(self) -> None:
        self.times.clear()
        self._values.clear()

    def add(self, rows: Iterable[Row], now: float) -> None:
        """One sample of these series' values, taken at `now`."""
        found: list[tuple[int, float]] = []
        for name, labels, value in rows:
            i = self._index.get((name, labels))
            if i is None:
                i = self._index[(name, labels)] = len(self._index)
                self._by_name.setdefault(name, []).append((labels, i))
            found.append((i, value))
        values = array("d", [NAN]) * len(self._index)
        for i, v in found:
            values[i] = v
        self.times.append(now)
        self._values.append(values)
        while len(self.times) > 2 and now - self.times[1] >= self.window_s:
            self.times.popleft()
            self._values.popleft()

    def span(self) -> float:
        """Seconds from the first sample kept to the last."""
        return self.times[-1] - self.times[0] if len(self.times) > 1 else 0.0

    def series(
        self, name: str, by: Sequence[str], where: Callable[[dict[str, str]], bool] | None = None
    ) -> dict[tuple[str, ...], list[float]]:
        """Per group (the values of the labels `by`), the sum of the series of `name` (those
        `where` accepts) in each sample, oldest first; NaN in a sample where none of them was."""
        members: dict[tuple[str, ...], list[int]] = {}
        for labels, i in self._by_name.get(name, ()):
            d = dict(labels)
            if where is None or where(d):
                members.setdefault(tuple(d.get(k, "") for k in by), []).append(i)
        out: dict[tuple[str, ...], list[float]] = {}
        for group, idx in members.items():
            sums = []
            for values in self._values:
                present = [values[i] for i in idx if i < len(values) and not math.isnan(values[i])]
                sums.append(math.fsum(present) if present else NAN)
            out[group] = sums
        return out


def growth(cumulative: Sequence[float]) -> list[float]:
    """A counter's growth between consecutive samples (missing counts as 0; a counter that went
    down, as a worker process's replacement may make it, as no growth)."""
    values = [0.0 if math.isnan(v) else v for v in cumulative]
    return [max(b - a, 0.0) for a, b in itertools.pairwise(values)]


def latest(values: Sequence[float]) -> float | None:
    """A gauge's last value; None when it was not in the last sample."""
    return None if not values or math.isnan(values[-1]) else values[-1]


def quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile of observations counted in cumulative (upper bound, count) buckets, the
    last bound +Inf, as Prometheus's histogram_quantile has it: linear within the bucket it falls
    in; in the +Inf bucket, the largest finite bound. None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    b = min(bisect_left([c for _, c in buckets], rank), len(buckets) - 1)
    upper, count = buckets[b]
    if math.isinf(upper):
        return buckets[b - 1][0] if b > 0 else None
    lower, below = (0.0, 0.0) if b == 0 else buckets[b - 1]
    if count == below:
        return upper
    return lower + (upper - lower) * (rank - below) / (count - below)


def bucket_growth(by_bound: dict[float, list[float]], first: int, last: int) -> list[tuple[float, float]]:
    """Cumulative (bound, count) buckets of what a histogram counted between samples `first`
    and `last`, from each bound's cumulative count in each sample."""
    out = []
    for bound in sorted(by_bound):
        counts = by_bound[bound]
        a, b = counts[first], counts[last]
        out.append((bound, max((0.0 if math.isnan(b) else b) - (0.0 if math.isnan(a) else a), 0.0)))
    return out
