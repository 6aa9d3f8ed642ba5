"""Reading a MindIE server: its native and TGI-style answers read as TGI's, its OpenAI routes as
OpenAI's; with `fullTextEnabled` the OpenAI routes' streams carry cumulative text, turned back
into deltas here."""

from gateway.codec.contract import StreamParser
from gateway.neutral.events import Event, TextDelta, expand


class FullTextParser:
    """Cumulative text (fullTextEnabled) to deltas, by prefix-diff against what went out."""

    __slots__ = ("_inner", "_sent")

    def __init__(self, inner: StreamParser) -> None:
        self._inner = inner
        self._sent: dict[int, str] = {}

    def _diff(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in expand(events):
            if type(ev) is TextDelta:
                assert isinstance(ev, TextDelta)
                sent = self._sent.get(ev.index, "")
                if ev.text.startswith(sent) and len(ev.text) > len(sent):
                    out.append(ev._replace(text=ev.text[len(sent) :]))
                    self._sent[ev.index] = ev.text
                # A text that is not an extension of what went out (a rewrite) cannot be unsent.
                continue
            out.append(ev)
        return out

    def feed(self, data: bytes) -> list[Event]:
        return self._diff(self._inner.feed(data))

    def close(self) -> list[Event]:
        return self._diff(self._inner.close())
