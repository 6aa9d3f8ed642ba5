"""The machine every tool-call format shares: text in, neutral events out.

A `CallStream` passes text through as `TextDelta`s until it meets one of its format's markers
(`<tool_call>`, `[TOOL_CALLS]`, ...); from there a `Reader` of that format reads the call(s) and
tells the stream what it found: a call's name, pieces of its arguments, its end, or that the
text is not a call after all. The stream turns that into `ToolCallDelta`s, in OpenAI's order (the
first delta of a call carries its id and name, later ones argument pieces), or gives the text
back as text. It holds back only what may still become a marker, and whitespace, which is
dropped where it only separates calls from each other or from the text.

Two ways to commit a call. Streamed (`whole_calls=False`): a call goes out as soon as its name
is read, its arguments as they arrive; a call that breaks after that point cannot be taken back
and ends with the arguments that came (as OpenAI's own streams end a call cut by max_tokens).
Whole (`whole_calls=True`): a call goes out in one delta once it is complete, and a call that
breaks comes back as the text it was. Either way the result does not depend on how the text is
split, and a whole-text parse is the same machine fed once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple

from gateway.adapters.toolcalls.calls import Tools
from gateway.neutral.events import Event, TextDelta, ToolCallDelta, new_event

_LAST = itemgetter(-1)  # a text's last character


def held_back(text: str, words: Sequence[str]) -> int:
    """Length of the longest end of `text` that one of `words` begins with (and is longer than)."""
    longest = 0
    for word in words:
        # Such an end starts with the word's first character: look only where one is.
        at = text.find(word[0], max(len(text) - len(word) + 1, 0))
        while at >= 0:
            if len(text) - at > longest and word.startswith(text[at:]):
                longest = len(text) - at
                break
            at = text.find(word[0], at + 1)
    return longest


class Outcome(NamedTuple):
    """How a reader ended: `done` (the text from `at` on is text again) or failed at `at`.
    A `quiet` failure is text that merely looked like a call's start (a brace in prose); it
    is given back as text without counting as a malformed call."""

    done: bool
    at: int
    quiet: bool = False


class Reader(ABC):
    """Reads a format's call(s) after a marker. `buf` holds the text from the marker on and
    grows as text arrives; `i` is where reading stands; `mark` is where the call being read
    began, what a failure gives back as text. A reader reports through its stream's `on_name`,
    `on_args` and `on_end`, and checks names with `known`."""

    __slots__ = ("buf", "i", "loud", "mark", "stream")

    sure = True  # the marker can only mean a call (a special token), so any failure counts

    def __init__(self, stream: CallStream, marker: str, consumed: bool) -> None:
        self.stream = stream
        self.buf = marker
        self.i = len(marker) if consumed else 0
        self.mark = 0
        self.loud = self.sure  # set once a call's name was read: failures count from there

    @abstractmethod
    def run(self, final: bool) -> Outcome | None:
        """Read on from `i`; None when more text is needed (never when `final`)."""

    def done(self, at: int) -> Outcome:
        return Outcome(True, at)

    def fail(self, at: int) -> Outcome:
        return Outcome(False, at, not self.loud)

    def end_call(self) -> None:
        self.stream.on_end()
        self.mark = self.i

    def skip_ws(self) -> None:
        buf, i, n = self.buf, self.i, len(self.buf)
        while i < n and buf[i] in " \t\r\n":
            i += 1
        self.i = i

    def literal(self, word: str, final: bool) -> bool | None:
        """Whether `word` is next (and read past it); None while the text ends inside it."""
        got = self.buf[self.i : self.i + len(word)]
        if got == word:
            self.i += len(word)
            return True
        if not final and len(got) < len(word) and word.startswith(got):
            return None
        return False


@dataclass(frozen=True, slots=True)
class Marker:
    """Text that starts a call: the reader for it, whether the marker is read past (else the
    reader reads it as part of the call, as `{` in Llama's JSON), and whether it counts only
    at the start of the answer."""

    text: str
    reader: Callable[[CallStream, str, bool], Reader]
    consumed: bool = True
    start_only: bool = False


class CallStream:
    """Reads one choice's text for tool calls: `feed` each piece, then `close` once."""

    __slots__ = (
        "_anywhere",
        "_anywhere_texts",
        "_args",
        "_index",
        "_markers",
        "_name",
        "_new_id",
        "_out",
        "_reader",
        "_sent",
        "_start_open",
        "_start_texts",
        "_tail",
        "_texted",
        "_whole",
        "_ws",
        "calls",
        "failures",
        "tools",
    )

    def __init__(
        self,
        markers: Sequence[Marker],
        tools: Tools,
        new_id: Callable[[], str],
        *,
        whole_calls: bool = False,
    ) -> None:
        self._markers = tuple(markers)
        self._anywhere_texts = tuple(m.text for m in self._markers if not m.start_only)
        self._start_texts = tuple(m.text for m in self._markers if m.start_only)
        self._anywhere = tuple({t[0] for t in self._anywhere_texts})
        self._start_open = bool(self._start_texts)
        self._whole = whole_calls
        self._new_id = new_id
        self.tools = tools
        self._reader: Reader | None = None
        self._tail = ""  # text that may be the start of a marker
        self._ws = ""  # whitespace at the end of the text so far
        self._texted = False  # some text went out
        self._out: list[Event] = []
        self._index = 0  # the call being read
        self._name: str | None = None
        self._args: list[str] = []  # its arguments not yet sent
        self._sent = False  # its first delta went out
        self.calls = 0  # calls sent
        self.failures = 0  # malformed calls

    # ---- what a reader reports -----------------------------------------------------------

    def known(self, name: str) -> bool:
        return self.tools.known(name)

    def on_name(self, name: str) -> None:
        self._name = name
        if not self._whole:
            self._send()

    def on_args(self, piece: str) -> None:
        if not piece:
            return
        if not self._sent:
            self._args.append(piece)
            return
        out = self._out
        last = out[-1] if out else None
        if type(last) is ToolCallDelta and last.call_index == self._index:
            out[-1] = last._replace(arguments=last.arguments + piece)
        else:
            out.append(ToolCallDelta(self._index, arguments=piece))

    def on_end(self) -> None:
        if not self._sent:
            self._send()
        self._next_call()

    def _send(self) -> None:
        self._ws = ""  # the call ends the text before it: its trailing whitespace goes
        name = self._name or ""
        self._out.append(ToolCallDelta(self._index, self._new_id(), name, "".join(self._args)))
        self._args = []
        self._sent = True
        self.calls += 1

    def _next_call(self) -> None:
        self._index += self._sent
        self._name, self._args, self._sent = None, [], False

    # ---- text ----------------------------------------------------------------------------

    def feed(self, text: str) -> list[Event]:
        if self._reader is None and not self._tail and not self._start_open:
            for c in self._anywhere:
                if c in text:
                    break
            else:  # no marker can start here: the text passes, less its trailing whitespace
                if self._texted and not self._ws:
                    body = text.rstrip()
                    self._ws = text[len(body) :]
                    return [new_event(TextDelta, (body, 0, None, None))] if body else []
                out = self._out = []
                self._text_out(text)
                return out
        out = self._out = []
        self._pump(text, False)
        return out

    def passes(self, texts: list[str]) -> bool:
        """Whether `feed` would give each of these texts back as it is: no call is being read or
        may be starting, some text went out and no whitespace waits, and none of them is empty,
        ends in whitespace or holds a marker's first character. A run of plain tokens then goes
        on as one event rather than one `feed` each."""
        if self._reader is not None or self._tail or self._start_open or not self._texted or self._ws:
            return False
        # (Asked of each text by map, without a Python step per text: a run is a read's tokens.)
        if not all(texts) or any(map(str.isspace, map(_LAST, texts))):
            return False
        joined = "".join(texts)
        return not any(c in joined for c in self._anywhere)

    def close(self) -> list[Event]:
        out = self._out = []
        self._pump("", True)
        tail, self._tail = self._tail, ""
        self._text_out(tail)
        if self._ws and not self.calls:
            out.append(TextDelta(self._ws))
        self._ws = ""
        return out

    def _pump(self, text: str, final: bool) -> None:
        while True:
            reader = self._reader
            if reader is not None:
                if text:
                    reader.buf += text
                    text = ""
                try:
                    outcome = reader.run(final)
                except Exception:  # a reader's defect must not end the stream: the call is malformed
                    outcome = Outcome(False, reader.i)
                if outcome is None:
                    if final:
                        outcome = Outcome(False, len(reader.buf))
                    else:
                        self._trim(reader)
                        return
                text = self._settle(reader, outcome)
            elif text:
                text = self._scan(text)
            else:
                return

    def _settle(self, reader: Reader, outcome: Outcome) -> str:
        """The text after a reader that ended, with anything it gave back sent as text."""
        self._reader = None
        rest = reader.buf[outcome.at :]
        if outcome.done:
            return rest
        if not outcome.quiet:
            self.failures += 1
        sent = self._sent  # streamed and named: the call stands as it came
        self._next_call()
        if not sent:
            self._text_out(reader.buf[reader.mark : outcome.at])
        return rest

    def _trim(self, reader: Reader) -> None:
        # Text a reader has read past and can no longer give back needs no keeping.
        cut = reader.i if self._sent else min(reader.i, reader.mark)
        if cut > 4096:
            reader.buf = reader.buf[cut:]
            reader.i -= cut
            reader.mark = max(reader.mark - cut, 0)

    def _scan(self, text: str) -> str:
        """Sends `text` up to the first marker and starts its reader; returns what follows it."""
        buf = self._tail + text if self._tail else text
        self._tail = ""
        at, marker = self._find(buf)
        if marker is None:
            keep = self._partial(buf)
            if keep:
                self._tail = buf[-keep:]
                buf = buf[:-keep]
            self._text_out(buf)
            return ""
        self._text_out(buf[:at])
        end = at + len(marker.text)
        self._start_open = False  # what comes after a call is no longer the answer's start
        self._reader = marker.reader(self, marker.text, marker.consumed)
        return buf[end:]

    def _find(self, buf: str) -> tuple[int, Marker | None]:
        best, found = len(buf), None
        lead = len(buf) - len(buf.lstrip()) if self._start_open else -1
        for m in self._markers:
            if m.start_only:
                at = lead if lead >= 0 and buf.startswith(m.text, lead) else -1
            else:
                at = buf.find(m.text, 0, best + len(m.text))
            if 0 <= at < best or (at == best and found is not None and len(m.text) > len(found.text)):
                best, found = at, m
        return best, found

    def _partial(self, buf: str) -> int:
        """How much of the end of `buf` may still become a marker."""
        keep = held_back(buf, self._anywhere_texts)
        if self._start_open:
            lead = buf.lstrip()
            if lead and any(len(lead) < len(m) and m.startswith(lead) for m in self._start_texts):
                keep = max(keep, len(lead))
        return keep

    def _text_out(self, text: str) -> None:
        if not text:
            return
        if self._ws:
            text = self._ws + text
        elif self.calls and not self._texted:
            text = text.lstrip()  # the content starts after the calls: not with their line breaks
        body = text.rstrip()
        self._ws = text[len(body) :]
        if body:
            self._out.append(new_event(TextDelta, (body, 0, None, None)))
            self._start_open = False
            self._texted = True
