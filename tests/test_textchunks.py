"""Text chunks read from a stream's template (gateway.codec.textchunks) mean exactly what the
full reading of each chunk means: the same events, the same errors, however the reads are cut."""

import json
import random

import pytest

from gateway.codec.parsing import PARSE_ERRORS
from gateway.codec.textchunks import _CLOSING, TextChunks
from gateway.dialects.openai.reading import OpenAIStreamParser
from gateway.dialects.triton.families import TRTLLM_READING
from gateway.dialects.triton.reading import CallState, TritonStreamParser
from gateway.neutral.events import Event, TextDelta, TextRun, UsageEvent, expand

TEXTS = [" The", ' say "hi"', " back\\slash", " café", " 😀", " line\nbreak", " tab\t", "\u2028", " }]}", " x"]


def chat_chunk(delta: dict[str, object], finish: str | None = None, **more: object) -> dict[str, object]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, **more}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m", "choices": [choice]}


def sse(payloads: list[object], dump=lambda o: json.dumps(o, separators=(",", ":"), ensure_ascii=False)) -> bytes:
    return b"".join(b"data: " + (p if isinstance(p, bytes) else dump(p).encode()) + b"\n\n" for p in payloads)


def vllm_chat(texts: list[str]) -> list[object]:
    """vLLM's shape: a role chunk with empty content, content chunks, finish, usage, [DONE]."""
    usage = {"prompt_tokens": 3, "completion_tokens": len(texts), "total_tokens": 3 + len(texts)}
    return [
        chat_chunk({"role": "assistant", "content": ""}),
        *(chat_chunk({"content": t}, None, token_ids=None) for t in texts),  # vLLM 0.32 names token_ids
        chat_chunk({}, "stop"),
        {**chat_chunk({}), "choices": [], "usage": usage},
        b"[DONE]",
    ]


def mindie_chat(texts: list[str]) -> list[object]:
    """MindIE's shape: the role in every delta, no logprobs field."""
    out: list[object] = []
    for t in texts:
        c = chat_chunk({"role": "assistant", "content": t})
        del c["choices"][0]["logprobs"]  # type: ignore[index]
        out.append(c)
    out += [chat_chunk({"role": "assistant", "content": ""}, "stop"), b"[DONE]"]
    return out


def completion(texts: list[str]) -> list[object]:
    def chunk(t: str, finish: str | None = None) -> dict[str, object]:
        choice = {"text": t, "index": 0, "logprobs": None, "finish_reason": finish}
        return {"id": "cmpl-1", "object": "text_completion", "created": 7, "choices": [choice], "model": "m"}

    return [*(chunk(t) for t in texts), chunk("", "length"), b"[DONE]"]


def read_all(parser: OpenAIStreamParser, data: bytes, cuts: list[int]) -> tuple[list[Event], str | None]:
    """The events a stream's reads give, each run of texts as its deltas (what they mean)."""
    events: list[Event] = []
    at = 0
    try:
        for cut in [*cuts, len(data)]:
            events += parser.feed(data[at:cut])
            at = cut
        events += parser.close()
    except PARSE_ERRORS as e:
        return expand(events), type(e).__name__
    return expand(events), None


def whole_reading(chat: bool) -> OpenAIStreamParser:
    parser = OpenAIStreamParser(chat=chat)
    parser._chunks = None  # every chunk read whole: the reference
    return parser


def event_cuts(data: bytes) -> list[int]:
    """Where each event ends: an event a read, as a model server writes them."""
    return [m + 2 for m in range(len(data) - 2) if data.startswith(b"\n\n", m)]


def check(data: bytes, chat: bool, seed: int) -> None:
    rng = random.Random(seed)
    expected = read_all(whole_reading(chat), data, [])
    for n in range(25):
        cuts = sorted(rng.sample(range(1, len(data)), k=rng.randint(0, min(6, len(data) - 1))))
        cuts = event_cuts(data) if n == 0 else cuts
        assert read_all(OpenAIStreamParser(chat=chat), data, cuts) == expected, cuts
        assert read_all(whole_reading(chat), data, cuts) == expected, cuts


@pytest.mark.parametrize("shape", [vllm_chat, mindie_chat, completion])
def test_template_reading_gives_what_whole_reading_gives(shape) -> None:  # type: ignore[no-untyped-def]
    chat = shape is not completion
    data = sse(shape(TEXTS * 3))
    events, error = read_all(OpenAIStreamParser(chat=chat), data, [])
    assert error is None
    assert "".join(e.text for e in events if type(e) is TextDelta) == "".join(TEXTS * 3)
    check(data, chat, seed=1)


def test_a_whole_stream_in_one_read_is_read_from_the_template() -> None:
    parser = OpenAIStreamParser(chat=True)
    events = parser.feed(sse(vllm_chat(TEXTS)))
    assert [e.text for e in expand(events) if type(e) is TextDelta] == TEXTS
    assert parser._chunks is not None and parser._chunks._pre is not None
    # The first text taught the template; the others came in one run.
    assert [type(e) for e in events[:2]] == [TextDelta, TextRun] and events[1].texts == TEXTS[1:]


def test_ascii_escaping_servers_and_crlf_streams_read_the_same() -> None:
    ascii_dump = lambda o: json.dumps(o)  # noqa: E731 - Python's defaults: spaces, \\u escapes
    check(sse(vllm_chat(TEXTS), ascii_dump), True, seed=2)
    check(sse(vllm_chat(TEXTS)).replace(b"\n", b"\r\n"), True, seed=3)


def test_an_event_of_several_data_lines_teaches_no_template() -> None:
    """Its line end is no byte of the wire's: a later line that repeats its bytes without the
    `data:` is no SSE field, and the stream breaks off there, as the full reading says."""
    head = b'{"id":"c",'
    rest = b'"object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"%s"}}]}'
    parser = OpenAIStreamParser(chat=True)
    assert parser.feed(b"data: " + head + b"\ndata: " + rest % b"Hi" + b"\n\n") == [TextDelta("Hi")]
    with pytest.raises(PARSE_ERRORS, match="broke off"):
        parser.feed(b"data: " + head + b"\n" + rest % b"x" + b"\n\n")


def test_chunks_that_only_look_like_the_template_are_read_whole() -> None:
    # The stream's own text chunk shape (vLLM's, with token_ids), so that each odd one starts and
    # ends as the template does.
    head = json.dumps(chat_chunk({"content": "\x00"}, None, token_ids=None), separators=(",", ":")).encode()
    pre, post = head.split(b'"\\u0000"')
    odd = [
        pre + b'"a","content":"b"' + post,  # a second content key: the last one counts
        pre + b"null" + post,  # no text at all
        pre + b"5" + post,  # a number where the text was
        pre + b'["a"]' + post,
        pre + b'"a"' + post.replace(b"null", b'"stop"', 1),  # finishes
        json.dumps(chat_chunk({"content": "x"}, None, token_ids=[5])).encode(),
        json.dumps(chat_chunk({"content": "y", "tool_calls": []})).encode(),
    ]
    stream = vllm_chat(["one", "two"])
    for item in odd:
        data = sse([*stream[:3], item, *stream[3:]])
        check(data, True, seed=4)


@pytest.mark.parametrize(
    "bad",
    [
        b'{"error": {"message": "boom"}}',
        b"not json",
        b'{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"x"',
    ],
)
def test_a_fault_after_a_run_of_text_comes_after_that_text(bad: bytes) -> None:
    stream = vllm_chat(["one", "two", "three"])
    data = sse([*stream[:4], bad, *stream[4:]])
    events, error = read_all(OpenAIStreamParser(chat=True), data, [])
    assert [e.text for e in events if type(e) is TextDelta] == ["one", "two", "three"]
    assert error is not None
    check(data, True, seed=5)


# ---- TRT-LLM through Triton: text events whose log probabilities change from one to the next ----


def trtllm(texts: list[str], lps: object = "varying", **more: object) -> list[object]:
    """A TRT-LLM ensemble's events as Triton writes them: ids and flags, log probabilities (a
    list per event, or a scalar: Triton unwraps one-element tensors), the text last."""
    out: list[object] = []
    for n, t in enumerate(texts):
        lp: object = [-0.5 - n / 7, -1.25e-3] if lps == "varying" else (-0.1 - n / 3 if lps == "scalar" else lps)
        out.append(
            {
                "model_name": "ensemble",
                "model_version": "1",
                "sequence_end": False,
                "sequence_id": 0,
                "sequence_start": False,
                "cum_log_probs": -0.25 * n,
                "output_log_probs": lp,
                "context_logits": 0.0,
                **more,
                "text_output": t,
            }
        )
    return out


def triton_parser(template: bool = True) -> TritonStreamParser:
    parser = TritonStreamParser(CallState(TRTLLM_READING, "prompt", 100))
    if not template:
        parser._chunks = None  # every event read whole: the reference
    return parser


def check_triton(data: bytes, seed: int) -> None:
    rng = random.Random(seed)
    expected = read_all(triton_parser(False), data, [])  # type: ignore[arg-type]
    assert expected[1] is not None or any(type(e) is UsageEvent for e in expected[0])
    for n in range(25):
        cuts = sorted(rng.sample(range(1, len(data)), k=rng.randint(0, min(6, len(data) - 1))))
        cuts = event_cuts(data) if n == 0 else cuts
        assert read_all(triton_parser(), data, cuts) == expected, cuts  # type: ignore[arg-type]


@pytest.mark.parametrize("lps", ["varying", "scalar", [0.0], [0.0, 0.0, 0.0]])
def test_trtllm_events_read_from_the_template_count_their_tokens(lps: object) -> None:
    data = sse(trtllm(TEXTS * 3, lps))
    parser = triton_parser()
    events, error = read_all(parser, data, [])  # type: ignore[arg-type]
    assert error is None
    assert "".join(e.text for e in events if type(e) is TextDelta) == "".join(TEXTS * 3)
    assert parser._chunks is not None and parser._chunks.read > 0  # the template was used
    per = 2 if lps == "varying" else 1 if lps == "scalar" else len(lps)  # type: ignore[arg-type]
    usage = [e.usage for e in events if type(e) is UsageEvent]
    assert usage and usage[0].completion_tokens == per * len(TEXTS) * 3
    check_triton(data, seed=6)


def test_trtllm_events_that_only_look_like_the_template_are_read_whole() -> None:
    stream = trtllm(["one", "two", "three"])
    odd = [
        {**stream[0], "output_log_probs": [[-0.5], [-0.25]]},  # beams: nested lists
        {**stream[0], "output_log_probs": None},
        {**stream[0], "cum_log_probs": "-1.5"},  # a hole holding a string
        {**stream[0], "context_logits": [1.5, 2.5]},  # a list where a number was
        {**stream[0], "text_output": ["a", "b"]},
        {**stream[0], "sequence_end": True},
        {**stream[0], "text_output": 'say "hi"\n'},
    ]
    for n, item in enumerate(odd):
        check_triton(sse([*stream[:2], item, *stream[2:]]), seed=10 + n)
    # Bytes that line up with the template's but hold two values in one hole, or break off.
    head = sse(stream[:2])
    raw = sse([stream[2]]).replace(b'"cum_log_probs":-0.5', b'"cum_log_probs":-0.5,"x":1')
    # Two lines: the first's payload is no JSON, the second no data line.
    check_triton(head + sse([stream[2]]).replace(b',"text_output"', b'\n,"text_output"'), seed=24)
    # A CR ends a line too, though JSON would take it for white space after a hole.
    check_triton(head + sse([stream[2]]).replace(b',"text_output"', b'\r,"text_output"'), seed=25)
    check_triton(head + raw + sse(stream[:1]), seed=20)
    check_triton(head + sse([stream[2]]).replace(b"[-0.7", b"[-0.7,,"), seed=21)


def test_an_error_event_after_a_run_of_trtllm_text_comes_after_that_text() -> None:
    stream = trtllm(["one", "two", "three"])
    data = sse([*stream, {"error": "boom"}])
    events, error = read_all(triton_parser(), data, [])  # type: ignore[arg-type]
    assert [e.text for e in events if type(e) is TextDelta] == ["one", "two", "three"]
    assert error is not None
    check_triton(data, seed=22)


def test_a_trtllm_event_whose_bytes_part_from_the_template_midway_counts_nothing_twice() -> None:
    # Its holes are there, counted one too, but the bytes after them are not the template's
    # (no text_output): it is read whole, and what the template saw of it is not counted.
    stream = trtllm(["one", "two", "three"])
    odd = sse([stream[2]]).replace(b',"text_output"', b',"text"')
    check_triton(sse(stream[:2]) + odd + sse(stream[:2]), seed=23)


def test_output_log_probs_count_one_per_value_in_every_shape():
    """A flat list and a run's list of lists are counted in one go; other shapes (None inside,
    deeper nesting, flags) the long way, to the same rule: every value but None is a token."""
    from gateway.dialects.triton.reading import tensor_count

    shapes = {
        None: 0,
        -0.5: 1,
        (): 0,
        (-0.1,): 1,
        ((-0.1,), (-0.2, -0.3)): 3,
        ((-0.1,), (None,)): 1,
        ((1, (2, 3)),): 3,
        (None, 1.0): 1,
        ((),): 0,
        (True,): 1,
        ((0, 0.0),): 2,
    }

    def lists(v: object) -> object:
        return [lists(x) for x in v] if isinstance(v, tuple) else v

    for shape, n in shapes.items():
        assert tensor_count(lists(shape)) == n, shape


# ---- Damaged streams: whatever the bytes, the template reads what the whole reading reads ----

# Bytes that sit where a template's are, or look like them: keys, separators, line ends, quotes,
# escapes, numbers and brackets.
DAMAGE = [
    b'"',
    b"\\",
    b",",
    b"\n",
    b"\r",
    b"\n\n",
    b"}",
    b"]",
    b"[",
    b"1",
    b"-0.5",
    b" ",
    b"data: ",
    b',"text_output":',
    b',"output_log_probs":',
    b'"content":',
    b'"x"',
    b"null",
]


def damaged(data: bytes, rng: random.Random) -> bytes:
    """`data` with a few edits: bytes put in, taken out, or a stretch repeated."""
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data))
        kind = rng.random()
        if kind < 0.5:
            data = data[:at] + rng.choice(DAMAGE) + data[at:]
        elif kind < 0.8:
            data = data[:at] + data[at + rng.randint(1, 20) :]
        else:
            end = min(len(data), at + rng.randint(1, 200))
            data = data[:end] + data[at:end] + data[end:]
    return data


@pytest.mark.parametrize("shape", ["chat", "trtllm", "trtllm-one-hole"])
def test_damaged_streams_read_from_the_template_as_they_read_whole(shape: str) -> None:
    rng = random.Random(shape)
    texts = [rng.choice(TEXTS) for _ in range(40)]
    if shape == "chat":
        clean = sse(vllm_chat(texts))
    else:
        events = trtllm(texts)
        if shape == "trtllm-one-hole":
            for e in events:
                del e["cum_log_probs"], e["context_logits"]  # type: ignore[attr-defined]
        clean = sse(events)

    def parser(template: bool) -> OpenAIStreamParser | TritonStreamParser:
        if shape == "chat":
            return OpenAIStreamParser(chat=True) if template else whole_reading(True)
        return triton_parser(template)

    undamaged = read_all(parser(False), clean, [])  # type: ignore[arg-type]
    differs = 0
    for _ in range(300):
        data = damaged(clean, rng)
        # Cut anywhere, or an event a read.
        cuts = event_cuts(data) if rng.random() < 0.5 else sorted(rng.sample(range(1, len(data)), k=rng.randint(0, 3)))
        expected = read_all(parser(False), data, [])  # type: ignore[arg-type]
        assert read_all(parser(True), data, cuts) == expected, (data, cuts)  # type: ignore[arg-type]
        differs += expected != undamaged
    assert differs > 100  # the damage mostly changes what the stream says, so the test can fail


@pytest.mark.parametrize("lps", ["varying", "scalar", [0.0], "chat"])
def test_a_clean_run_is_proved_whole_in_one_go(lps: object) -> None:
    """The usual read is taken apart and put back together in a few passes (not cut event by
    event): its parts are every event's holes and text, in order."""
    if lps == "chat":
        parser: object = OpenAIStreamParser(chat=True)
        data = sse(vllm_chat(TEXTS))
        per = 1
    else:
        parser = triton_parser()
        data = sse(trtllm(TEXTS, lps))
        per = 3  # cum_log_probs, output_log_probs, the text
    first = data.index(b"\n\n", data.index(b'" The"')) + 2  # the first text teaches the template
    parser.feed(data[:first])  # type: ignore[attr-defined]
    chunks = parser._chunks  # type: ignore[attr-defined]
    assert chunks is not None and chunks._pre is not None and chunks._per == per
    body, count, end, _ = chunks._whole(data, first, len(data))
    assert body is not None and end > first
    values = json.loads(b"[" + body + b"]")
    texts = values[per - 1 :: per]
    assert texts == TEXTS[1 : len(texts) + 1] and len(values) == count == per * len(texts)
    # One byte off in the middle of the run, and it is not proved (but read right event by event).
    broken = data[: (first + end) // 2] + b" " + data[(first + end) // 2 :]
    body, count = chunks._whole(broken, first, len(broken))[:2]
    assert body is None or not chunks._decode(body, count, [])


def test_a_run_is_proved_its_templates_in_order() -> None:
    """A run whose events hold the template's bytes between their holes, but not each once and
    in its order, or a hole that holds what stands for them while the run is cut apart, is not
    taken whole: read event by event, it reads as the full reading does."""
    data = sse(trtllm(TEXTS, "varying"))
    first = data.index(b"\n\n", data.index(b'" The"')) + 2
    events = data[first:].split(b"\n\n")
    seg0, seg1 = b',"output_log_probs":', b',"context_logits":0.0,"text_output":'
    assert all(seg0 in e and seg1 in e for e in events[:3])

    def swapped(event: bytes) -> bytes:  # the two stretches' places exchanged, the holes kept
        head, _, rest = event.partition(seg0)
        middle, _, text = rest.partition(seg1)
        return head + seg1 + middle + seg0 + text

    def doubled(event: bytes, other: bytes) -> tuple[bytes, bytes]:  # one stretch moved to the next event
        return event.replace(seg1, seg1 + b"0" + seg1, 1), other.replace(seg1, b"", 1)

    one, two = doubled(events[1], events[2])
    damaged = [
        [events[0], swapped(events[1]), *events[2:]],
        [events[0], one, two, *events[3:]],
        [events[0], events[1].replace(b'"cum_log_probs":', b'"cum_log_probs":\x01', 1), *events[2:]],
        [events[0], events[1].replace(seg1 + b'"', seg1 + b'"\x02', 1), *events[2:]],
    ]
    for run in damaged:
        read = data[:first] + b"\n\n".join(run)
        parser = triton_parser()
        parser.feed(data[:first])
        chunks = parser._chunks
        assert chunks is not None and chunks._segs == (seg0, seg1)
        body, count = chunks._whole(read, first, len(read))[:2]
        assert body is None or not chunks._decode(body, count, [])
        assert read_all(triton_parser(), read, []) == read_all(triton_parser(False), read, [])  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", ["chat", "trtllm"])
def test_an_event_a_read_is_read_from_the_template(shape: str) -> None:
    """A model server's stream: each event in a read of its own, the way a paced stream comes."""
    data = sse(vllm_chat(TEXTS)) if shape == "chat" else sse(trtllm(TEXTS))
    cuts = event_cuts(data)
    template = OpenAIStreamParser(chat=True) if shape == "chat" else triton_parser()
    whole = whole_reading(True) if shape == "chat" else triton_parser(False)
    assert (
        read_all(template, data, cuts)
        == read_all(whole, data, cuts)
        == read_all(whole_reading(True) if shape == "chat" else triton_parser(False), data, [])
    )  # type: ignore[arg-type]
    chunks = template._chunks
    assert chunks is not None and chunks._pre is not None
    if shape == "trtllm":
        assert chunks.read == len(TEXTS) - 1  # every event but the first, from the template


def test_a_read_of_many_odd_events_is_taken_apart_whole_a_few_times_at_most() -> None:
    """Text chunks between other events (here, ones that finish a second choice): the read is
    tried whole a few times (its last events left out one by one), then cut event by event from
    where each other event ends, so a long read costs no more than a few times its length."""
    stream = vllm_chat(["one", "two"])
    odd = chat_chunk({}, "stop")
    odd["choices"][0]["index"] = 1  # type: ignore[index]
    texts = [t + str(n) for n in range(50) for t in TEXTS[:2]]
    events = [chat_chunk({"content": t}, None, token_ids=None) for t in texts]
    mixed = [x for e in events for x in (e, odd)]
    data = sse([*stream[:2], *mixed, *stream[3:]])
    calls = 0

    class Counted(TextChunks):
        def _whole(self, data: bytes, start: int, stop: int) -> tuple[list[bytes] | None, int, int]:
            nonlocal calls
            calls += 1
            return super()._whole(data, start, stop)

    parser = OpenAIStreamParser(chat=True)
    parser._chunks = Counted("choices.delta.content")
    got = read_all(parser, data, [])
    assert got == read_all(whole_reading(True), data, [])
    assert [e.text for e in got[0] if type(e) is TextDelta][1:] == texts
    assert calls <= _CLOSING  # a few tries at the whole read, then event by event: not one per event
