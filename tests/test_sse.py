"""The sans-IO SSE decoder against the WHATWG event-stream rules, and against every fixture
stream cut at every byte offset."""

import random

import pytest

from gateway.sse import DONE_FRAME, SSEDecoder, SSEEvent, encode_data, line_ends_are
from tests.fixtures.openai.wire import STREAMS, raw


def decode(*chunks: bytes) -> tuple[list[SSEEvent], list[bytes]]:
    d = SSEDecoder()
    out: list[SSEEvent] = []
    for c in chunks:
        out += d.feed(c)
    out += d.close()
    return out, d.stray


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol: bytes) -> None:
    body = b"data: a" + eol + eol + b"data:b" + eol + b"data:  c" + eol + eol
    events, stray = decode(body)
    assert events == [SSEEvent(b"a"), SSEEvent(b"b\n c")]
    assert stray == []


def test_mixed_line_endings_and_cr_split_from_lf() -> None:
    events, _ = decode(b"data: 1\r", b"\n\r", b"\ndata: 2\r\r", b"data: 3\n", b"\n")
    assert events == [SSEEvent(b"1"), SSEEvent(b"2"), SSEEvent(b"3")]


def test_data_with_and_without_space_and_multiline() -> None:
    events, _ = decode(b"data:x\ndata: y\ndata:\n\n")
    assert events == [SSEEvent(b"x\ny\n")]
    events, _ = decode(b"data\n\n")  # a field name alone: empty value, still dispatched
    assert events == [SSEEvent(b"")]


def test_comments_and_keep_alives_are_ignored() -> None:
    events, stray = decode(b": keep-alive\n\n:\n\ndata: a\n: inside\n\n\n\n")
    assert events == [SSEEvent(b"a")]
    assert stray == []


def test_event_and_id_fields() -> None:
    events, _ = decode(b"event: error\nid: 7\ndata: {}\n\ndata: next\n\nid\ndata: z\n\nid: a\0b\ndata: w\n\n")
    # The event type resets after each dispatch; the last event id persists, an empty id clears
    # it, and an id containing NUL is ignored.
    assert events == [
        SSEEvent(b"{}", "error", "7"),
        SSEEvent(b"next", "", "7"),
        SSEEvent(b"z", "", ""),
        SSEEvent(b"w", "", ""),
    ]


def test_event_without_data_is_not_dispatched() -> None:
    events, _ = decode(b"event: ping\n\ndata: a\n\n")
    assert events == [SSEEvent(b"a")]


def test_done_and_unterminated_last_event() -> None:
    events, _ = decode(b"data: [DONE]\n\n")
    assert events == [SSEEvent(b"[DONE]")]
    assert encode_data(b"[DONE]") == DONE_FRAME
    assert encode_data(b"{}", space=False) == b"data:{}\n\n"
    # An event that never got its blank line is discarded at the end of the stream.
    events, _ = decode(b"data: a\n\ndata: b")
    assert events == [SSEEvent(b"a")]


def test_stray_lines_are_reported() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: a\n\nInternal Server Error\n") == [SSEEvent(b"a")]
    assert d.stray == [b"Internal Server Error"]
    d.feed(b"retry: 10\n")  # a known field, not stray
    assert d.stray == [b"Internal Server Error"]
    d = SSEDecoder()
    assert d.close() == []
    d.feed(b"no newline at end")
    assert d.stray == []
    d.close()
    assert d.stray == [b"no newline at end"]


@pytest.mark.parametrize("keep", [False, True])
def test_nothing_after_a_stray_line_is_dispatched_however_the_reads_are_cut(keep: bool) -> None:
    stream = b"data: a\n\nevent: x\ndata: b\n\nInternal Server Error\n\ndata: c\n\nevent: y\ndata: d\n\n"
    for cut in range(len(stream) + 1):
        d = SSEDecoder(keep=keep)
        got = [e.data for e in d.feed(stream[:cut]) + d.feed(stream[cut:]) + d.close()]
        assert got == [b"a", b"b"], cut
        assert d.stray == [b"Internal Server Error"]


def test_utf8_split_across_reads() -> None:
    text = "data: w\u00f6rld \U0001f44b \u4f60\u597d\n\n".encode()
    for i in range(len(text) + 1):
        events, _ = decode(text[:i], text[i:])
        assert events == [SSEEvent("w\u00f6rld \U0001f44b \u4f60\u597d".encode())]
        assert events[0].data.decode() == "w\u00f6rld \U0001f44b \u4f60\u597d"


def test_utf8_split_mid_character() -> None:
    emoji = "\U0001f44b".encode()
    assert len(emoji) == 4
    events, _ = decode(b"data: " + emoji[:1], emoji[1:3], emoji[3:] + b"\n\n")
    assert events[0].data.decode() == "\U0001f44b"


def variants(data: bytes) -> list[bytes]:
    return [data, data.replace(b"\n", b"\r\n"), data.replace(b"\n", b"\r")]


@pytest.mark.parametrize("name", STREAMS)
def test_fixture_streams_split_at_every_offset(name: str) -> None:
    for data in variants(raw(name)):
        whole, stray = decode(data)
        assert stray == []
        assert len(whole) == data.count(b"data:")
        for i in range(len(data) + 1):
            assert decode(data[:i], data[i:])[0] == whole, (name, i)
        assert decode(*(data[i : i + 1] for i in range(len(data))))[0] == whole


def test_chat_fixture_stream_payloads() -> None:
    events, _ = decode(raw("chat_stream.sse"))
    assert events[-1] == SSEEvent(b"[DONE]")
    assert [e.data[:6] for e in events[:-1]] == [b'{"id":'] * 6


def test_leading_bom_is_stripped_even_when_split() -> None:
    bom = b"\xef\xbb\xbf"
    body = bom + b"data: a\n\n"
    for i in range(len(body) + 1):
        events, stray = decode(body[:i], body[i:])
        assert events == [SSEEvent(b"a")], i
        assert stray == []
    assert decode(bom[:1], bom[1:2], bom[2:], b"data: b\n\n")[0] == [SSEEvent(b"b")]
    # Only at the very start: a BOM later is data like any other.
    assert decode(b"data: a\n\ndata: " + bom + b"x\n\n")[0] == [SSEEvent(b"a"), SSEEvent(bom + b"x")]
    # Bytes that merely begin like a BOM are kept.
    assert decode(b"\xef\xbbx\n")[1] == [b"\xef\xbbx"]


def test_every_split_of_a_mixed_stream_decodes_the_same():
    """The fast cut for `data: ...` events and the full rules for the rest agree, however the
    bytes are split into reads."""
    stream = (
        b"data: one\n\n"
        b"data:two\n\n"
        b": keep-alive\n\n"
        b"event: x\nid: 7\ndata: three\n\n"
        b"data: four\ndata: more\n\n"
        b"data: five\r\n\r\n"
        b"data: six\n\n"
        b"event: named\ndata: seven\n\n"
        b"event:bare\ndata:eight\n\n"
        b"event: two\ndata: nine\ndata: ten\n\n"
        b"event: empty\n\n"
        b"event: last\ndata: eleven\n\n"
    )
    want = [b"one", b"two", b"three", b"four\nmore", b"five", b"six", b"seven", b"eight", b"nine\nten", b"eleven"]
    for cut in range(1, len(stream)):
        for step in (cut, 3, 7):
            d = SSEDecoder()
            got: list[bytes] = []
            pos = 0
            for size in [cut] + [step] * len(stream):
                got += d.feed_data(stream[pos : pos + size])
                pos += size
                if pos >= len(stream):
                    break
            assert got == want, (cut, step)
    d = SSEDecoder()
    events = d.feed(stream)
    assert [(e.data, e.event, e.id) for e in events][2] == (b"three", "x", "7")
    assert events[3].id == "7"  # the last event id carries over
    assert [(e.data, e.event) for e in events[6:]] == [
        (b"seven", "named"),
        (b"eight", "bare"),
        (b"nine\nten", "two"),
        (b"eleven", "last"),
    ]
    fresh = SSEDecoder().feed(b"event: named\ndata: seven\n\nevent:bare\ndata:eight\n\n")
    assert [(e.data, e.event, e.id) for e in fresh] == [(b"seven", "named", None), (b"eight", "bare", None)]
    named = b"event: a\ndata: one\n\nevent: b\ndata: two\ndata: more\n\nevent:c\ndata:three\n\n"
    for cut in range(len(named) + 1):
        d = SSEDecoder()
        assert d.feed_data(named[:cut]) + d.feed_data(named[cut:]) == [b"one", b"two\nmore", b"three"], cut


def _as_kept(events: list[SSEEvent]) -> list[tuple[bytes, bool, bytes]]:
    """What a relay passes on of each event: its lines, or its lone `data: ` line written again."""
    return [(e.data, e.dispatched, e.raw if e.raw is not None else encode_data(e.data)) for e in events]


def test_a_keeping_decoder_gives_each_event_as_it_came_however_the_reads_are_cut() -> None:
    stream = (
        b"data: one\n\n"
        b"data:two\n\n"
        b": keep-alive\n\n"
        b"event: x\nid: 7\nretry: 10\ndata: three\n\n"
        b"data: four\n: note\ndata:more\n\n"
        b"data: five\r\n\r\n"
        b"event: ping\r\r"
        b"data:six\n\n"
        b"event: named\ndata: seven\n\n"
        b"event:bare\ndata:eight\n\n"
    )
    want = [
        (b"one", True, b"data: one\n\n"),
        (b"two", True, b"data:two\n\n"),
        (b"", False, b": keep-alive\n\n"),
        (b"three", True, b"event: x\nid: 7\nretry: 10\ndata: three\n\n"),
        (b"four\nmore", True, b"data: four\n: note\ndata:more\n\n"),
        (b"five", True, b"data: five\n\n"),
        (b"", False, b"event: ping\n\n"),
        (b"six", True, b"data:six\n\n"),
        (b"seven", True, b"event: named\ndata: seven\n\n"),
        (b"eight", True, b"event:bare\ndata:eight\n\n"),
    ]
    for cut in range(1, len(stream)):
        for step in (cut, 3, 7):
            d = SSEDecoder(keep=True)
            got: list[SSEEvent] = []
            pos = 0
            for size in [cut] + [step] * len(stream):
                got += d.feed(stream[pos : pos + size])
                pos += size
                if pos >= len(stream):
                    break
            assert _as_kept(got) == want, (cut, step)


def test_a_keeping_decoder_gives_back_the_event_under_way_as_it_came() -> None:
    """What a keeping decoder gives back of an event a read broke off in, put before the next
    read, decodes as if nothing had been taken: the same events, each as it came, and the ids."""
    stream = (
        b"event: x\nid: 7\ndata: one\n\n"
        b": note\ndata: two\ndata: more\n\n"
        b"event: named\ndata: three\n\n"
        b"data: four\r\n\r\n"
        b"id: 9\nevent: y\ndata: five\n\n"
    )
    whole = [
        (e.id, *kept)
        for e, kept in zip(
            SSEDecoder(keep=True).feed(stream), _as_kept(SSEDecoder(keep=True).feed(stream)), strict=True
        )
    ]
    for cut in range(1, len(stream)):
        for second in (cut, len(stream)):
            d = SSEDecoder(keep=True)
            got = d.feed(stream[:cut])
            held = d.take_partial()
            got += d.feed(held + stream[cut:second]) + d.feed(stream[second:])
            assert [(e.id, *kept) for e, kept in zip(got, _as_kept(got), strict=True)] == whole, (cut, held)
    d = SSEDecoder(keep=True)
    d.feed(b"data: one\n\nevent: x\nda")
    assert d.take_partial() == b"event: x\nda" and d.between_events()


def test_a_keeping_decoder_passes_on_no_line_that_is_not_sse() -> None:
    d = SSEDecoder(keep=True)
    assert _as_kept(d.feed(b"data: a\n\nInternal Server Error\n\n: after\n\n")) == [(b"a", True, b"data: a\n\n")]
    assert d.stray == [b"Internal Server Error"]


def test_line_ends_are_is_a_count_of_line_ends() -> None:
    """The memchr way of telling how many line ends a range holds agrees with counting them, for
    every guess near the true count, ranges ending anywhere (a range that does not end with a line
    end holds no answer of `n`), CRs already in the bytes included."""
    rng = random.Random(7)
    for _ in range(3000):
        data = bytes(rng.choice(b"ab\n\n\r") for _ in range(rng.randrange(1, 40)))
        end = rng.randrange(1, len(data) + 1)
        true = data.count(b"\n", 0, end)
        for n in range(max(0, true - 3), true + 4):
            assert line_ends_are(data, end, n) == (data[end - 1] == 10 and n == true), (data, end, n)
