"""Stop-string emulation for backends that cannot stop on strings themselves.

The matcher is sans-IO: text in, text safe to show out. It holds back only as much of the tail
as could still turn into a stop string, so streaming stays as live as the backend allows. The
stream wrapper applies it per choice and, once every choice has stopped, ends the stream and
closes the upstream response, which cancels the generation on the backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.codec.capabilities import at_end
from gateway.codec.contract import EventStream
from gateway.neutral.events import Event, FinishEvent, ReasoningDelta, TextDelta, ToolCallDelta, expand
from gateway.neutral.types import Finish, Result


class StopMatcher:
    """Cuts a text stream at the first stop string.

    "First" means the stop that is complete earliest in the text (ties go to the longer one),
    which is what a generator checking after every token would see; the result does not depend
    on how the text is chunked.
    """

    __slots__ = ("_held", "_include", "_longest", "_stops", "matched")

    def __init__(self, stops: Sequence[str], include_stop: bool = False) -> None:
        self._stops = tuple(dict.fromkeys(s for s in stops if s))
        self._include = include_stop
        self._longest = max((len(s) for s in self._stops), default=0)
        self._held = ""
        self.matched: str | None = None

    def feed(self, text: str) -> tuple[str, bool]:
        if self.matched is not None:
            return "", True
        if not self._stops:
            return text, False
        buf = self._held + text
        best_end = -1
        best: str | None = None
        for s in self._stops:
            i = buf.find(s)
            if i < 0:
                continue
            end = i + len(s)
            if best is None or end < best_end or (end == best_end and len(s) > len(best)):
                best, best_end = s, end
        if best is not None:
            self.matched = best
            self._held = ""
            return buf[: best_end if self._include else best_end - len(best)], True
        keep = self._holdback(buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], False

    def _holdback(self, buf: str) -> int:
        """Length of the longest tail of `buf` that some stop string starts with (and is longer than)."""
        for k in range(min(len(buf), self._longest - 1), 0, -1):
            tail = buf[-k:]
            for s in self._stops:
                if len(s) > k and s.startswith(tail):
                    return k
        return 0

    def flush(self) -> str:
        held, self._held = self._held, ""
        return "" if self.matched is not None else held


def cut_text(text: str, stops: Sequence[str], include_stop: bool = False) -> tuple[str, str | None]:
    """A whole answer cut at its first stop string; the stop string that matched, if one did."""
    m = StopMatcher(stops, include_stop)
    out, matched = m.feed(text)
    return (out, m.matched) if matched else (out + m.flush(), None)


def apply_stops(result: Result, stops: Sequence[str], include_stop: bool) -> Result:
    """Every choice of a whole result cut at its first stop string; such choices finish STOP_STRING."""
    choices = []
    cut = False
    for choice in result.choices:
        text, matched = cut_text(choice.text, stops, include_stop)
        if matched is not None:
            choice = replace(choice, text=text, finish=Finish.STOP_STRING, stop=matched)
            cut = True
        choices.append(choice)
    # A cut answer no longer matches the backend's own body.
    return replace(result, choices=choices, passthrough=None) if cut else result


@dataclass(slots=True)
class _ChoiceState:
    matcher: StopMatcher
    # Token ids and logprobs of deltas whose text is still held back ride on the next emitted delta.
    token_ids: list[int] | None = None
    logprobs: list[Any] = field(default_factory=list)
    logprobs_other: Any = None
    done: bool = False


class StopStream:
    """An EventStream that enforces stop strings on the text of another one.

    `n` is how many choices the request asked for: the stream ends early once that many have
    stopped (or finished), so one choice hitting a stop never cuts the others short.
    """

    __slots__ = ("_closed", "_ended", "_include", "_inner", "_n", "_states", "_stops")

    def __init__(self, inner: EventStream, stops: Sequence[str], include_stop: bool, *, n: int = 1) -> None:
        self._inner = inner
        self._stops = tuple(stops)
        self._include = include_stop
        self._n = max(1, n)
        self._states: dict[int, _ChoiceState] = {}
        self._ended = False
        self._closed = False

    def _state(self, index: int) -> _ChoiceState:
        st = self._states.get(index)
        if st is None:
            st = self._states[index] = _ChoiceState(StopMatcher(self._stops, self._include))
        return st

    @staticmethod
    def _delta(text: str, index: int, st: _ChoiceState) -> TextDelta:
        logprobs: Any = st.logprobs if st.logprobs else st.logprobs_other
        delta = TextDelta(text, index, logprobs, st.token_ids)
        st.token_ids, st.logprobs, st.logprobs_other = None, [], None
        return delta

    @staticmethod
    def _keep_extras(ev: TextDelta, st: _ChoiceState) -> None:
        if ev.token_ids:
            st.token_ids = [*(st.token_ids or ()), *ev.token_ids]
        if isinstance(ev.logprobs, list):
            st.logprobs.extend(ev.logprobs)
        elif ev.logprobs is not None:
            st.logprobs_other = ev.logprobs

    def _finished(self) -> int:
        return sum(1 for st in self._states.values() if st.done)

    @property
    def ended(self) -> bool:
        return at_end(self._inner)

    async def next(self) -> list[Event] | None:
        while not self._ended:
            batch = await self._inner.next()
            if batch is None:
                self._ended = True
                tail: list[Event] = [
                    self._delta(t, i, st) for i, st in self._states.items() if (t := st.matcher.flush())
                ]
                return tail or None
            out = self._filter(batch)
            if self._ended:
                await self._close_inner()
            if out:
                return out
        return None

    def _filter(self, batch: list[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in expand(batch):  # matched token by token
            if type(ev) is TextDelta:
                st = self._state(ev.index)
                if st.done:
                    continue
                self._keep_extras(ev, st)
                text, matched = st.matcher.feed(ev.text)
                if text:
                    out.append(self._delta(text, ev.index, st))
                if matched:
                    st.done = True
                    out.append(FinishEvent(Finish.STOP_STRING, ev.index, st.matcher.matched))
            elif type(ev) is FinishEvent:
                st = self._state(ev.index)
                if st.done:
                    continue
                held = st.matcher.flush()
                if held:
                    out.append(self._delta(held, ev.index, st))
                st.done = True
                out.append(ev)
            elif type(ev) is ReasoningDelta or type(ev) is ToolCallDelta:
                if not self._state(ev.index).done:
                    out.append(ev)
            else:
                # UsageEvent and Frame belong to no choice; usage must survive an early end.
                out.append(ev)
        if self._finished() >= self._n and any(st.matcher.matched for st in self._states.values()):
            # Keep the batch's usage but nothing after the last stop; then stop reading upstream.
            self._ended = True
        return out

    async def _close_inner(self) -> None:
        if not self._closed:
            self._closed = True
            await self._inner.aclose()

    async def aclose(self) -> None:
        self._ended = True
        await self._close_inner()
