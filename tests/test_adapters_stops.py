"""Stop-string emulation: the sans-IO matcher, whole answers, and the stream wrapper."""

from gateway.adapters.stops import StopMatcher, StopStream, apply_stops, cut_text
from gateway.neutral.events import Event, FinishEvent, ReasoningDelta, TextDelta, ToolCallDelta, UsageEvent
from gateway.neutral.types import Choice, Finish, Result, Usage


def run(stops: list[str], chunks: list[str], include: bool = False) -> tuple[list[str], bool, str]:
    m = StopMatcher(stops, include)
    outs: list[str] = []
    matched = False
    for c in chunks:
        out, matched = m.feed(c)
        outs.append(out)
    return outs, matched, m.flush()


# ---- StopMatcher ---------------------------------------------------------------------------


def test_stop_split_across_chunks() -> None:
    outs, matched, rest = run(["STOP"], ["Hello ST", "O", "P and more"])
    assert outs == ["Hello ", "", ""]
    assert matched
    assert rest == ""


def test_include_stop() -> None:
    outs, matched, _ = run(["STOP"], ["Hello ST", "OP tail"], include=True)
    assert outs == ["Hello ", "STOP"]
    assert matched


def test_holdback_is_only_what_could_still_become_a_stop() -> None:
    m = StopMatcher(["###"])
    assert m.feed("abc #") == ("abc ", False)  # "#" could begin "###"
    assert m.feed("#x") == ("##x", False)  # "##x" cannot: released at once
    assert m.feed("no hash here") == ("no hash here", False)
    assert m.flush() == ""


def test_false_start_then_real_stop() -> None:
    outs, matched, _ = run(["abcd"], ["xab", "cabc", "d!"])
    assert outs == ["x", "abc", ""]
    assert matched


def test_stop_inside_multibyte_text() -> None:
    outs, matched, _ = run(["你好"], ["héllo 🙂 你", "好 wörld"])
    assert outs == ["héllo 🙂 ", ""]
    assert matched
    outs, matched, _ = run(["🙂"], ["a🙂b"], include=True)
    assert outs == ["a🙂"]


def test_multiple_stops_with_shared_prefixes() -> None:
    # The stop completed earliest wins, whatever the chunking.
    for chunks in (["xab", "cd"], ["x", "a", "b", "c", "d"], ["xabcd"]):
        outs, matched, _ = run(["abcd", "bc"], chunks)
        assert "".join(outs) == "xa", chunks
        assert matched
        # "abc" and "bc" both complete at the same character: the longer one is the match.
        outs, matched, _ = run(["abcd", "abc", "bc"], chunks)
        assert "".join(outs) == "x", chunks
    # Same end: the longer stop takes the whole match.
    outs, _, _ = run(["abc", "bc"], ["xabc"])
    assert outs == ["x"]
    outs, _, _ = run(["ab", "abc"], ["z", "a"])
    assert outs == ["z", ""]


def test_holdback_uses_longest_pending_prefix_of_any_stop() -> None:
    m = StopMatcher(["</s>", "END"])
    assert m.feed("text </") == ("text ", False)
    assert m.feed("x E") == ("</x ", False)
    assert m.feed("N") == ("", False)
    assert m.flush() == "EN"


def test_after_a_match_everything_is_swallowed() -> None:
    m = StopMatcher(["."])
    assert m.feed("one. two") == ("one", True)
    assert m.feed("three.") == ("", True)
    assert m.flush() == ""
    assert m.matched == "."


def test_no_stops_and_empty_stops() -> None:
    assert run([], ["a", "b"]) == (["a", "b"], False, "")
    assert run([""], ["a"]) == (["a"], False, "")


def test_cut_text() -> None:
    assert cut_text("Hello STOP world", ["STOP"]) == ("Hello ", "STOP")
    assert cut_text("Hello STOP world", ["STOP"], include_stop=True) == ("Hello STOP", "STOP")
    assert cut_text("Hello ST", ["STOP"]) == ("Hello ST", None)
    assert cut_text("a. b! c", [".", "!"]) == ("a", ".")


# ---- apply_stops ---------------------------------------------------------------------------


def test_apply_stops_cuts_each_choice() -> None:
    res = Result(
        choices=[Choice(0, "alpha END beta", finish=Finish.LENGTH), Choice(1, "no stop here", finish=Finish.EOS)],
        usage=Usage(3, 7),
        passthrough=b"{}",
    )
    out = apply_stops(res, ["END"], include_stop=False)
    assert [(c.text, c.finish) for c in out.choices] == [("alpha ", Finish.STOP_STRING), ("no stop here", Finish.EOS)]
    assert out.usage == Usage(3, 7)
    assert out.passthrough is None


def test_apply_stops_include() -> None:
    out = apply_stops(Result([Choice(0, "a\n\nb")]), ["\n\n"], include_stop=True)
    assert out.choices[0].text == "a\n\n"
    assert out.choices[0].finish is Finish.STOP_STRING


# ---- StopStream ----------------------------------------------------------------------------


class FakeStream:
    def __init__(self, batches: list[list[Event]]) -> None:
        self.batches = list(batches)
        self.reads = 0
        self.closed = 0

    async def next(self) -> list[Event] | None:
        assert not self.closed, "read after close"
        self.reads += 1
        return self.batches.pop(0) if self.batches else None

    async def aclose(self) -> None:
        self.closed += 1


async def drain(s: StopStream) -> list[Event]:
    out: list[Event] = []
    while (batch := await s.next()) is not None:
        out.extend(batch)
    return out


def describe(events: list[Event]) -> list[tuple[object, ...]]:
    d: list[tuple[object, ...]] = []
    for e in events:
        if isinstance(e, TextDelta):
            d.append(("text", e.index, e.text))
        elif isinstance(e, FinishEvent):
            d.append(("finish", e.index, e.reason))
        elif isinstance(e, UsageEvent):
            d.append(("usage", e.usage.prompt_tokens, e.usage.completion_tokens))
        else:
            d.append((type(e).__name__,))
    return d


async def test_stream_ends_early_on_a_stop_and_closes_upstream() -> None:
    inner = FakeStream(
        [
            [TextDelta("Hello "), TextDelta("wor")],
            [TextDelta("ld. ST")],
            [TextDelta("OP"), TextDelta(" never"), UsageEvent(Usage(5, 9))],
            [TextDelta("not read"), FinishEvent(Finish.LENGTH)],
        ]
    )
    s = StopStream(inner, ["STOP"], include_stop=False)
    events = await drain(s)
    assert describe(events) == [
        ("text", 0, "Hello "),
        ("text", 0, "wor"),
        ("text", 0, "ld. "),
        ("finish", 0, Finish.STOP_STRING),
        ("usage", 5, 9),
    ]
    assert inner.closed == 1
    assert inner.reads == 3
    assert await s.next() is None
    await s.aclose()
    assert inner.closed == 1


async def test_stream_include_stop_and_held_text_before_upstream_finish() -> None:
    inner = FakeStream([[TextDelta("a ST")], [TextDelta("x S")], [FinishEvent(Finish.EOS), UsageEvent(Usage(1, 2))]])
    s = StopStream(inner, ["STOP"], include_stop=True)
    assert describe(await drain(s)) == [
        ("text", 0, "a "),
        ("text", 0, "STx "),
        ("text", 0, "S"),
        ("finish", 0, Finish.EOS),
        ("usage", 1, 2),
    ]
    assert inner.closed == 0  # ended on its own: the engine releases it as usual


async def test_stream_flushes_held_text_at_end_without_finish() -> None:
    inner = FakeStream([[TextDelta("end E")]])
    s = StopStream(inner, ["END"], include_stop=False)
    assert describe(await drain(s)) == [("text", 0, "end "), ("text", 0, "E")]


async def test_stream_with_stop_matched_with_include() -> None:
    inner = FakeStream([[TextDelta("x\n"), TextDelta("\ny")]])
    s = StopStream(inner, ["\n\n"], include_stop=True)
    assert describe(await drain(s)) == [("text", 0, "x"), ("text", 0, "\n\n"), ("finish", 0, Finish.STOP_STRING)]
    assert inner.closed == 1


async def test_stream_passes_other_events_and_keeps_token_ids() -> None:
    inner = FakeStream(
        [
            [ReasoningDelta("think"), TextDelta("ab", token_ids=[1]), TextDelta("c", token_ids=[2])],
            [ToolCallDelta(0, "id", "f", "{}"), TextDelta("X", token_ids=[3])],
        ]
    )
    s = StopStream(inner, ["cX"], include_stop=False)
    events = await drain(s)
    assert describe(events) == [
        ("ReasoningDelta",),
        ("text", 0, "ab"),
        ("ToolCallDelta",),
        ("finish", 0, Finish.STOP_STRING),
    ]
    text = events[1]
    assert isinstance(text, TextDelta)
    assert text.token_ids == [1]


async def test_stream_with_several_choices_waits_for_all() -> None:
    inner = FakeStream(
        [
            [TextDelta("a.", index=0), TextDelta("b", index=1)],
            [TextDelta("more", index=0), TextDelta("b.", index=1)],
            [UsageEvent(Usage(1, 4))],
        ]
    )
    s = StopStream(inner, ["."], include_stop=False, n=2)
    assert describe(await drain(s)) == [
        ("text", 0, "a"),
        ("finish", 0, Finish.STOP_STRING),
        ("text", 1, "b"),
        ("text", 1, "b"),
        ("finish", 1, Finish.STOP_STRING),
    ]
    assert inner.closed == 1


async def test_aclose_closes_inner_once() -> None:
    inner = FakeStream([[TextDelta("x")]])
    s = StopStream(inner, ["y"], include_stop=False)
    await s.aclose()
    await s.aclose()
    assert inner.closed == 1
    assert await s.next() is None
