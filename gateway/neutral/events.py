"""Neutral stream events: what an upstream stream parser emits and a client renderer consumes.

Events are named tuples: immutable, and as cheap to build as the slotted classes they replace,
since they are made once per upstream event on the hot path. A consumer that needs a changed
event (fan-out re-indexing, token ids filled in) makes a copy with `_replace`. Renderers tell
them apart by `type(ev) is X`. (A field called `index` hides the tuple method of that name,
which nothing here uses; type checkers are told so where it is declared.)
"""

from typing import Any, NamedTuple

from gateway.neutral.types import Finish, Usage


class TextDelta(NamedTuple):
    text: str
    index: int = 0  # type: ignore[assignment]
    logprobs: Any = None
    token_ids: list[int] | None = None


class TextRun(NamedTuple):
    """Texts of one choice that came an upstream event each, with nothing else but, where the
    backend names them, each one's token ids (no log probabilities): as many TextDeltas, in one
    event. A stream's text chunks read together from their template (gateway.codec.textchunks)
    come as one, so the renderers that write a token per event can write the run in one go too;
    a consumer with a rule per token takes the deltas from `expand`."""

    texts: list[str]
    index: int = 0  # type: ignore[assignment]
    # Each text's token id, where the backend names one for each (TGI's and MindIE's streams);
    # a token of several ids, or none, comes as a TextDelta of its own.
    ids: list[int] | None = None


class ReasoningDelta(NamedTuple):
    text: str
    index: int = 0  # type: ignore[assignment]


class ToolCallDelta(NamedTuple):
    """A fragment of one tool call; `call_index` orders calls within a choice, as OpenAI does."""

    call_index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    index: int = 0  # type: ignore[assignment]


class FinishEvent(NamedTuple):
    reason: Finish
    index: int = 0  # type: ignore[assignment]
    # The stop string that ended the choice, where it is known (reason STOP_STRING).
    stop: str | None = None


class UsageEvent(NamedTuple):
    usage: Usage


class Frame(NamedTuple):
    """Upstream events the client's dialect takes as they are (same-wire routes only): `payload`
    is them with their framing, as the client gets them (the lines the upstream sent, the model
    renamed where the route renames it).

    Parsers emit it next to the neutral events decoded from the same payload: pass-through
    renderers write the frames and ignore the rest, translating renderers do the opposite.
    `usage_only` marks a frame that carries nothing but usage (which the gateway may have asked
    for on its own behalf); `final` one that finishes a choice; `fingerprint` is the
    `system_fingerprint` a usage-only frame carries.
    """

    payload: bytes
    usage_only: bool = False
    final: bool = False
    fingerprint: str | None = None


# An event built with every field given, past the named tuple's own constructor (a Python
# function that costs as much again): `new_event(TextDelta, (text, index, None, None))`, for
# the parsers that make one per streamed token.
new_event = tuple.__new__

Event = TextDelta | TextRun | ReasoningDelta | ToolCallDelta | FinishEvent | UsageEvent | Frame
# Events that belong to one choice (they carry its `index`).
INDEXED = (TextDelta, TextRun, ReasoningDelta, ToolCallDelta, FinishEvent)
# Events that carry generated tokens (for time-to-first-token and inter-token latency).
TOKENS = (TextDelta, TextRun, ToolCallDelta, ReasoningDelta)


def expand(events: list[Event]) -> list[Event]:
    """`events` with each TextRun as its TextDeltas (the list itself when it holds none)."""
    if TextRun not in set(map(type, events)):
        return events
    out: list[Event] = []
    for ev in events:
        if type(ev) is TextRun:
            assert isinstance(ev, TextRun)
            if ev.ids is None:
                out += [TextDelta(text, ev.index) for text in ev.texts]
            else:
                out += [TextDelta(text, ev.index, None, [i]) for text, i in zip(ev.texts, ev.ids, strict=True)]
        else:
            out.append(ev)
    return out


def text_events(texts: list[str], index: int, out: list[Event], empty: bool = False) -> None:
    """A run's texts as one TextRun (a lone one as a TextDelta); `empty`: an empty text is an
    event of its own too."""
    if len(texts) == 1:  # a model server's pace: an event a read
        if texts[0] or empty:
            out.append(new_event(TextDelta, (texts[0], index, None, None)))
        return
    if not empty:
        texts = list(filter(None, texts))
    if len(texts) > 1:
        out.append(new_event(TextRun, (texts, index, None)))
    elif texts:
        out.append(new_event(TextDelta, (texts[0], index, None, None)))
