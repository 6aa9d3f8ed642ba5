"""Reading Triton generate answers: whole bodies and `data:` streams, into neutral form.

Finish reasons and token counts come from the backend when its flavour reports them (vLLM's
`finish_reason` and `num_*_tokens`, MindIE's `details`, TRT-LLM's `output_log_probs` length),
else from the model's tokenizer when one is configured, and are otherwise left out. Triton
streams have no terminator, so the end of the body is a normal end; only MindIE, asked for
details, promises a final event, and its absence means the stream was cut short.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any

from gateway import jsonutil
from gateway.adapters.stops import StopMatcher
from gateway.codec.parsing import EventParser
from gateway.codec.renaming import renamed
from gateway.codec.textchunks import TextChunks
from gateway.neutral.errors import Kind, UpstreamClass, UpstreamError, body_text, clip, relaying
from gateway.neutral.events import Event, FinishEvent, Frame, TextDelta, UsageEvent, new_event, text_events
from gateway.neutral.types import Choice, Finish, Result, Usage
from gateway.records import record


@record
class Reading:
    """How the answers of one backend family (a flavour) say what they say beyond their text."""

    # What one answer or event says of its finish and token counts, kept in the reader.
    take: "Callable[[Reader, dict[str, Any]], None]"
    # The answer is over: raise if what came cannot be a whole answer of this family.
    end: "Callable[[Reader, bool, str], None]"
    # The fields of its streamed text events that change from one to the next (their paths,
    # gateway.codec.textchunks), those of them `fold` reads, and `fold`: what a run of such
    # events says beyond its texts, kept in the reader as `take` keeps it of each.
    varying: "Mapping[str, bool]" = field(default_factory=dict)
    reads: tuple[str, ...] = ()
    fold: "Callable[[Reader, dict[str, list[Any]]], None] | None" = None


@dataclass(slots=True)
class CallState:
    reading: Reading
    prompt: str
    max_tokens: int | None
    # Stop words TRT-LLM leaves in its output that the client wants removed.
    strip_stops: list[str] | None = None
    # MindIE with details: the last event carries details.finish_reason.
    expect_final: bool = False
    stops_requested: bool = False
    tokenizer: Any = None
    # Counted with the tokenizer when the request was built, for servers that do not report it.
    prompt_tokens: int | None = None
    # A client of Triton's own wire takes the answer as it came, with `model_name` saying the
    # name the client used (JSON bytes) when the route exposes the model under another.
    passthrough: bool = False
    rename: bytes | None = None

    def count_prompt(self) -> None:
        """The prompt's tokens, counted with the tokenizer (once)."""
        if self.prompt_tokens is None and self.tokenizer is not None:
            self.prompt_tokens = self.tokenizer.count_prompt(self.prompt)

    def relay(self, data: bytes) -> bytes:
        """A whole answer as the client gets it on a pass-through: the model renamed."""
        return data if self.rename is None else renamed(data, "model_name", self.rename)


def error_body_text(body: bytes) -> str:
    """The message of an error body: JSON, or (from a streaming path) an SSE event holding it."""
    text = body.strip()
    if text.startswith(b"data:"):
        text = text[5:].split(b"\n", 1)[0].strip()
    try:
        return error_text(jsonutil.loads(text))
    except jsonutil.JSONDecodeError:
        return body_text(body)


def error_text(obj: Any) -> str:
    """The message of an `{"error"}` body (MindIE's `error_type` after it), `clip`ped."""
    text = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, str):
            kind = obj.get("error_type")
            text = f"{err} ({kind})" if isinstance(kind, str) and kind else err
        elif err is not None:
            text = jsonutil.dumps_str(err)
    return clip(jsonutil.dumps_str(obj) if text is None else text)


def first_value(value: Any) -> Any:
    """A one-sequence output: Triton unwraps single-element tensors, but not always."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


_NUMBERS = frozenset((float, int))
_LISTS = frozenset((list,))


def tensor_count(value: Any) -> int:
    """How many values a tensor holds (TRT-LLM's output_log_probs: one per generated token)."""
    if type(value) is not list:
        return 0 if value is None else 1
    # The usual shapes, counted without a Python step per value: a flat list of numbers, or
    # (a run of stream events read together) a list of such lists.
    kinds = set(map(type, value))
    if kinds <= _NUMBERS:
        return len(value)
    if kinds == _LISTS and set(map(type, chain.from_iterable(value))) <= _NUMBERS:
        return sum(map(len, value))
    n = 0
    for v in value:  # the rest (None among the values, deeper lists, flags) value by value
        n += (0 if v is None else 1) if type(v) is not list else tensor_count(v)
    return n


@dataclass(slots=True)
class Reader:
    """What one answer (or one stream's events so far) says beyond its text."""

    st: CallState
    finish: Finish | None = None
    saw_finish_field: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    text: list[str] = field(default_factory=list)
    # A finish was read in the event that carried it (vLLM's finish_reason, MindIE's details).
    fresh_finish: bool = False

    def take(self, obj: Any, midstream: bool) -> str:
        """The text of one answer or stream event; what else it says is kept. (Once per streamed
        token: the usual case, a string text, is read without the general rules.)"""
        if type(obj) is not dict:
            raise ValueError("not an object")
        if "error" in obj:
            if midstream:
                raise UpstreamError(
                    f"backend error mid-stream: {error_text(obj)}", upstream_class=UpstreamClass.MIDSTREAM
                )
            # Triton answers 200 with an error when the request does not fit the model (`stream`
            # on /generate of a decoupled model, or a model that gives several responses): the
            # gateway wrote this request (a Triton client's is refused in `parse_body`), so its
            # configuration does not fit the model.
            raise UpstreamError(f"backend error in a 200 answer: {error_text(obj)}")
        text = obj.get("text_output")
        if type(text) is not str:
            text = first_value(text)
            text = text if isinstance(text, str) else ""
        self.st.reading.take(self, obj)
        if text:
            self.text.append(text)
        return text

    def conclude(self, stream: bool, stopped: bool) -> tuple[Finish | None, Usage | None]:
        st = self.st
        tok = st.tokenizer
        full = "".join(self.text)
        st.reading.end(self, stream, full)
        completion = self.completion_tokens
        if completion is None and tok is not None:
            completion = tok.count(full)
        prompt = self.prompt_tokens if self.prompt_tokens is not None else st.prompt_tokens
        finish = self.finish
        if stopped:
            finish = Finish.STOP_STRING
        elif finish is None:
            # TRT-LLM names no reason: length when the count reached the cap, else a normal end.
            at_cap = completion is not None and st.max_tokens is not None and completion >= st.max_tokens
            finish = Finish.LENGTH if at_cap else Finish.EOS
        usage = None if prompt is None and completion is None else Usage(prompt, completion)
        return finish, usage


def parse_body(st: CallState, body: bytes) -> Result:
    obj = jsonutil.loads(body)
    if st.passthrough and isinstance(obj, dict) and "error" in obj:
        # Triton's 200 with an error (see `Reader.take`) is what its generate extension says a
        # failed request answers with a 400: a Triton client wrote the request, and gets that
        # status with Triton's own body.
        err = UpstreamError(
            f"backend refused the request: {error_text(obj)}",
            upstream_class=UpstreamClass.STATUS_4XX,
            status=400,
            kind=Kind.VALIDATION,
        )
        raise relaying(err, body)
    reader = Reader(st)
    text = reader.take(obj, midstream=False)
    stopped = False
    matched = None
    if st.strip_stops:
        matcher = StopMatcher(st.strip_stops)
        cut, stopped = matcher.feed(text)
        text = cut if stopped else cut + matcher.flush()
        matched = matcher.matched
    finish, usage = reader.conclude(stream=False, stopped=stopped)
    model = obj.get("model_name") if isinstance(obj, dict) else None
    result = Result([Choice(0, text, finish=finish, stop=matched)], usage, model)
    return replace(result, passthrough=st.relay(body)) if st.passthrough else result


class TritonStreamParser(EventParser):
    """`data:` events (with or without the space) to neutral events. A finish the backend sends
    with the last text goes out with it; otherwise the finish, and usage always, at the end."""

    __slots__ = ("_finished", "_matcher", "_reader", "_st", "_stopped")
    # A Triton stream has no terminator: its end is a normal end, and an event that came whole
    # but for the blank line after it (an error, say) still counts.
    unterminated_last = True

    def __init__(self, st: CallState) -> None:
        # Translated, the text events are read from the stream's template: they differ in their
        # text and in what the family's reading folds over a run (TRT-LLM's log probabilities,
        # whose number counts the tokens; the vLLM backend's token counts) or ignores (timings).
        reading = st.reading
        templated = not st.passthrough and not st.strip_stops
        chunks = (
            TextChunks("text_output", reading.varying, TritonStreamParser._run, reading.reads) if templated else None
        )
        super().__init__(chunks, st.passthrough)
        self._st = st
        self._reader = Reader(st)
        self._matcher = StopMatcher(st.strip_stops) if st.strip_stops else None
        self._stopped = False
        self._finished = False

    def on_event(self, data: bytes, out: list[Event]) -> None:
        chunks = self._chunks
        reader = self._reader
        obj = jsonutil.loads(data)
        text = reader.take(obj, midstream=True)
        if chunks is not None and text and not reader.fresh_finish and type(obj.get("text_output")) is str:
            self.teach(data, 0, text)
        if self._st.passthrough:
            out.append(Frame(self.relayed(data, "model_name", self._st.rename)))
        if self._matcher is not None:
            if self._stopped:
                return
            text, self._stopped = self._matcher.feed(text)
        if text:
            out.append(new_event(TextDelta, (text, 0, None, None)))
        if reader.fresh_finish and reader.finish is not None and not self._finished and not self._stopped:
            reader.fresh_finish = False
            self._finished = True
            out.append(FinishEvent(reader.finish))

    def _run(self, texts: list[str], held: dict[str, list[Any]], out: list[Event]) -> None:
        """A run of text events read from the template: what `on_event` does for each."""
        reader = self._reader
        fold = reader.st.reading.fold
        if fold is not None:
            fold(reader, held)
        reader.text += filter(None, texts)
        text_events(texts, 0, out)

    def on_end(self, out: list[Event]) -> None:
        if self._matcher is not None and not self._stopped:
            rest = self._matcher.flush()
            if rest:
                out.append(TextDelta(rest))
        finish, usage = self._reader.conclude(stream=True, stopped=self._stopped)
        if finish is not None and not self._finished:
            out.append(FinishEvent(finish, 0, self._matcher.matched if self._matcher is not None else None))
        if usage is not None:
            out.append(UsageEvent(usage))
