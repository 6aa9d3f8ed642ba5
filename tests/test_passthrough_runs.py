"""A pass-through relays a stream's bytes as they came (the model renamed where the route renames
it), however the reads are cut: the token events of OpenAI's chunks, Anthropic's Messages and the
Responses API go out undecoded in runs (one event a read included, a model server's pace), and
what the gateway reads of the rest (finish, usage, faults) is what reading every event gives."""

import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway import jsonutil
from gateway.codec.parsing import A_TOKEN, PARSE_ERRORS, EventParser
from gateway.codec.renaming import RenamedRuns, Renamer, renamed
from gateway.dialects.anthropic.reading import MessagesStreamParser
from gateway.dialects.openai.reading import A_TOKEN as OPENAI_TOKEN
from gateway.dialects.openai.reading import OpenAIStreamParser
from gateway.dialects.responses.reading import ResponsesStreamParser
from gateway.neutral.events import TOKENS, Event, FinishEvent, Frame
from tests.test_textchunks import event_cuts
from tests.test_textchunks_recorded import lengthened

FIX = Path(__file__).parent / "fixtures"
NAME = b'"gpt-4o-mini"'
MODEL = re.compile(rb'"model":"[^"]*"')


def named(name: bytes) -> Callable[[bytes], int]:
    """How many events of a stream are token events named `name`."""
    return lambda data: data.count(b"event: " + name + b"\n")


def openai_tokens(data: bytes) -> int:
    """How many events of an OpenAI chunk stream carry a token: a choice under way, not empty."""
    return sum(b'"finish_reason":null' in e and b'"content":""' not in e for e in data.split(b"\n\n"))


# A fixture: its parser (given the name it renames the model to), the text's path, the event a
# run relayed undecoded adds for the metrics, and how many token events the stream has.
STREAMS: dict[str, tuple[Callable[[bytes | None], EventParser], str, Event, Callable[[bytes], int]]] = {
    "anthropic/sdk_basic_stream.sse": (
        lambda r: MessagesStreamParser(True, r),
        "delta.text",
        A_TOKEN,
        named(b"content_block_delta"),
    ),
    "anthropic/sdk_tool_use_stream.sse": (
        lambda r: MessagesStreamParser(True, r),
        "delta.text",
        A_TOKEN,
        named(b"content_block_delta"),
    ),
    "anthropic/vllm_max_tokens_stream.sse": (
        lambda r: MessagesStreamParser(True, r),
        "delta.text",
        A_TOKEN,
        named(b"content_block_delta"),
    ),
    "responses/vllm_stream.txt": (
        lambda r: ResponsesStreamParser(True, r),
        "delta",
        A_TOKEN,
        named(b"response.output_text.delta"),
    ),
    "openai/vllm_chat_stream.sse": (
        lambda r: OpenAIStreamParser(True, True, r),
        "choices.delta.content",
        OPENAI_TOKEN,
        openai_tokens,
    ),
    "openai/chat_stream.sse": (
        lambda r: OpenAIStreamParser(True, True, r),
        "choices.delta.content",
        OPENAI_TOKEN,
        openai_tokens,
    ),
}


def relayed(
    parser: EventParser, data: bytes, cuts: list[int], whole: bool = False
) -> tuple[bytes, list[Event], str | None]:
    """The bytes a client gets, what else was read (but the token marks), and the fault; `whole`:
    every event read whole (the runs, of token events and of quiet ones, left out)."""
    if whole:
        parser._quiet = None
    events: list[Event] = []
    at, fault = 0, None
    try:
        for cut in [*cuts, len(data)]:
            events += EventParser.feed(parser, data[at:cut]) if whole else parser.feed(data[at:cut])
            at = cut
        events += parser.close()
    except PARSE_ERRORS as e:
        fault = type(e).__name__
    frames = b"".join(e.payload for e in events if type(e) is Frame)
    # Token events are only counted by the metrics: a run relayed undecoded marks that tokens came.
    rest = [e for e in events if type(e) is not Frame and not isinstance(e, TOKENS)]
    return frames, rest, fault


@pytest.mark.parametrize("name", sorted(STREAMS))
@pytest.mark.parametrize("rename", [None, NAME])
def test_a_passthrough_relays_every_byte_and_reads_what_the_full_reading_reads(name: str, rename: bytes | None):
    factory, path, mark, tokens = STREAMS[name]
    rng = random.Random(name)
    recorded = (FIX / name).read_bytes()
    if not recorded.endswith(b"\n\n"):
        recorded += b"\n\n"
    data = lengthened(recorded, path, rng)
    reference = relayed(factory(rename), data, event_cuts(data), whole=True)
    frames, _, fault = reference
    assert fault is None
    sent = data.replace(b"data: [DONE]\n\n", b"")  # OpenAI's end: its renderer's to write
    if rename is None:
        assert frames == sent
    else:
        assert frames.count(b'"model":' + NAME) >= 1
        assert MODEL.sub(b"", frames) == MODEL.sub(b"", sent)
    # A model server's pace: one event a read, each token event relayed as a run of one.
    assert relayed(factory(rename), data, event_cuts(data)) == reference
    paced, at, runs = factory(rename), 0, 0
    for cut in [*event_cuts(data), len(data)]:
        runs += sum(e is mark for e in paced.feed(data[at:cut]))
        at = cut
    assert runs == tokens(data) > 0
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(data)), k=rng.randint(0, 5)))
        assert relayed(factory(rename), data, cuts) == reference, cuts
    whole = factory(rename)
    got = relayed(whole, data, [])
    assert got == reference


@pytest.mark.parametrize(
    "name",
    [b'"gpt-4o-mini"', b'"tiny"', b'"t"', b'"model"', b'"a \\"model\\": x"', b'"/models/Qwen2.5-7B-Instruct"'],
)
def test_a_run_renamed_as_bytes_is_what_renaming_each_event_gives(name: bytes):
    chunk = b'data: {"id":"c1","model":"tiny","choices":[{"delta":{"content":"%s"}}]}\n\n'
    reads = [
        b"".join(chunk % t for t in (b"a", b"b", b"c")),
        chunk % b'say \\"model\\":\\"tiny\\"',  # the field's bytes inside a string are escaped
        chunk % b"x" + b'data: {"id":"c2","model":"other","choices":[]}\n\n',  # another name
        chunk % b"y" + b'data: {"model" : "tiny","choices":[]}\n\n',  # spaced otherwise
        b'data: {"role":"model","model":"tiny"}\n\n',  # the key's word as a value
        b'data: {"choices":[]}\n\n',  # no model at all
        chunk % b"z" + b'data: {"model":"tiny","choices":[{"delta":{"model":"tiny"}}]}\n\n',  # a second
    ]
    renamer = Renamer("model", name)
    for data in reads:
        assert renamer(data, data.count(b"\n\n")) == each_renamed(data, name), data


def each_renamed(run: bytes, name: bytes) -> bytes:
    """A run of whole events, each renamed on its own, as reading them one by one does."""
    return b"\n\n".join(renamed(event, "model", name) for event in run.split(b"\n\n"))


def test_a_whole_answer_renamed_is_what_the_fields_expression_gives() -> None:
    """An answer's first model field is renamed without the expression when it is written
    plainly; on random bytes built of the field's pieces the two agree, whatever comes first."""
    pieces = [b'"model"', b":", b'"', b"\\", b"x", b" ", b'"model":"', b"{", b"}", b",", b'\\"', b'a"', b"\\u0041"]
    expression = re.compile(rb'"model"(\s*:\s*)"(?:[^"\\]|\\.)*"')
    rng = random.Random(7)
    for _ in range(50_000):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        expected = expression.sub(lambda m: b'"model"' + m.group(1) + NAME, data, count=1)
        assert renamed(data, "model", NAME) == expected, data


LONE = (
    b'data: {"id":"c","object":"chat.completion.chunk","model":"tiny","choices":[{"index":0,'
    b'"delta":{"content":" hi"},"logprobs":null,"finish_reason":%s}]}\n\n'
)


@pytest.mark.parametrize(
    ("event", "relayed"),
    [
        (LONE % b"null", True),
        (LONE % b'"stop"', False),  # a finish is read
        (LONE.replace(b'"finish_reason":%s', b'"finish_reason": %s') % b"null", False),  # not the usual bytes
        (LONE.replace(b"}]}", b'},{"index":1,"finish_reason":"length"}]}') % b"null", False),  # another choice ends
        (LONE.replace(b"}]}", b'},{"index":1,"finish_reason":null}]}') % b"null", False),  # two choices at once
        (LONE.replace(b"\n\n", b"\r\n\r\n") % b"null", False),  # CRs: the general way
        (LONE.replace(b"data: {", b"id: 7\ndata: {") % b"null", False),  # a field line of its own
        (b'data: {"choices":[],"usage":{"prompt_tokens":1}}\n\n', False),  # usage alone
    ],
)
def test_a_lone_event_is_relayed_undecoded_only_when_it_carries_tokens(event: bytes, relayed: bool) -> None:
    """A read of one event (a model server's pace) goes out undecoded only when its one choice
    is under way; whatever else it is, it is read, and what the client gets is the same."""
    parser = OpenAIStreamParser(True, passthrough=True)
    parser.feed(LONE % b"null")  # the stream has begun
    out = parser.feed(event)
    frames = [ev for ev in out if isinstance(ev, Frame)]
    assert b"".join(f.payload for f in frames).replace(b"\r", b"") == event.replace(b"\r", b"")
    assert (out == [Frame(event), OPENAI_TOKEN]) is relayed


def test_a_stream_of_several_choices_is_read_event_by_event_where_one_event_holds_two() -> None:
    """Asked for two choices, a server may put both in one chunk: then the totals that prove a
    run of one choice an event would let a finish hide beside two tokens, so such a read is read
    event by event, and what the gateway reads of it is what reading every event gives. Asked
    for one, the same read could not come, and the run goes out as it came."""
    both = LONE.replace(b"}]}", b'},{"index":1,"delta":{"content":" yo"},"logprobs":null,"finish_reason":null}]}')
    ends = LONE.replace(b'{"content":" hi"}', b"{}") % b'"stop"'  # choice 0 is done, choice 1 goes on
    one = LONE.replace(b'"index":0', b'"index":1') % b"null"
    data = LONE % b"null" + both % b"null" + ends + one + b"data: [DONE]\n\n"
    reference = relayed(OpenAIStreamParser(True, True, choices=2), data, event_cuts(data), whole=True)
    assert any(isinstance(e, FinishEvent) for e in reference[1])
    assert relayed(OpenAIStreamParser(True, True, choices=2), data, []) == reference
    whole = OpenAIStreamParser(True, True).feed(data)
    assert whole[:2] == [Frame(data[: data.find(b"data: [DONE]")]), OPENAI_TOKEN]


CHUNK = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"tiny","choices":[{"index":0,'
    b'"delta":{%s},"logprobs":null,"finish_reason":%s}]%s}\n\n'
)
OPENING = CHUNK % (b'"role":"assistant","content":""', b"null", b"")
CLOSING = CHUNK % (b"", b'"stop"', b"") + b"data: [DONE]\n\n"
PLAIN = [" the", " quick", " brown", "fox", " 42", " caf\u00e9", "{", "}", " [x]", ",", " :"]
# Texts and events a template cannot read: quotes and escapes in a text, a field of an event's
# own (a padding, a model named inside a text's delta), another id.
AWKWARD = [
    CHUNK % (b'"content":"say \\"hi\\""', b"null", b""),
    CHUNK % (b'"content":"a\\nb"', b"null", b""),
    CHUNK % (b'"content":" x"', b"null", b',"obfuscation":"q1"'),
    CHUNK % (b'"content":" x","model":"tiny"', b"null", b""),
    CHUNK.replace(b'"id":"c1"', b'"id":"c2"') % (b'"content":" x"', b"null", b""),
]


def chat_stream(rng: random.Random, awkward: bool) -> bytes:
    events = [OPENING]
    for _ in range(rng.randint(1, 40)):
        if awkward and rng.random() < 0.1:
            events.append(rng.choice(AWKWARD))
        else:
            events.append(CHUNK % (b'"content":' + jsonutil.dumps(rng.choice(PLAIN)), b"null", b""))
    return b"".join(events) + CLOSING


@pytest.mark.parametrize("awkward", [False, True])
def test_a_renamed_run_read_by_its_template_is_what_reading_each_event_gives(awkward: bool) -> None:
    """A renamed chat stream's runs are renamed by the template of its token events when each
    is the template's with a plain text, and the client gets what renaming each event gives,
    however the reads are cut; a stream with events the template cannot read gives the same."""
    rng = random.Random(11 + awkward)
    for _ in range(60):
        data = chat_stream(rng, awkward)
        reference = relayed(OpenAIStreamParser(True, True, NAME), data, event_cuts(data), whole=True)
        assert reference[2] is None
        for n in range(6):
            cuts = [] if n == 0 else sorted(rng.sample(range(1, len(data)), k=rng.randint(1, 4)))
            parser = OpenAIStreamParser(True, True, NAME)
            assert relayed(parser, data, cuts) == reference, cuts
            if n == 0 and not awkward:  # the stream in one read: its run is the template's
                assert isinstance(parser._runs, RenamedRuns)


def test_a_run_template_renames_what_renaming_each_event_gives() -> None:
    """A run the template proves is renamed as renaming each of its events gives, and one it
    does not prove (a quote in a text, an event that differs) is left to the counts."""
    lead, tail = CHUNK.split(b"%s", 1)[0] + b'"content":"', b'"},"logprobs":null,"finish_reason":null}]}\n\n'
    runs = RenamedRuns.of(lead, tail, "model", NAME)
    assert runs is not None
    texts = [b"a", b" b", b"", b"{", b"\\n", b'\\"', b"\\", b"model", b'"model":"x"', b"\n"]
    rng = random.Random(5)
    proved = 0
    for _ in range(5_000):
        events = [lead + b"".join(rng.choices(texts, k=rng.randint(0, 3))) + tail for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.2:
            events.insert(rng.randrange(len(events)), rng.choice(AWKWARD))
        run = b"".join(events)
        got = runs(run, 0, len(run))
        plain = all(b'"' not in e[len(lead) : -len(tail)] and b"\n" not in e[len(lead) : -len(tail)] for e in events)
        plain = plain and all(e.startswith(lead) and e.endswith(tail) for e in events)
        assert (got is not None) is plain, run
        if got is not None:
            proved += 1
            assert got == (each_renamed(run, NAME), len(events))
    assert proved > 1_000
    assert RenamedRuns.of(lead, tail.replace(b"}]}", b'},"model":"t"}]}'), "model", NAME) is None  # the key twice
    assert RenamedRuns.of(lead.replace(b'"model":"tiny"', b'"model":7'), tail, "model", NAME) is None  # not a string


# Events that begin as a token event of their stream and are something else, or are framed
# otherwise: a named run must never carry one out undecoded.
DISGUISED = {
    "anthropic/sdk_basic_stream.sse": [
        b'event: content_block_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens",'
        b'"stop_sequence":null},"usage":{"output_tokens":7}}\n\n',
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,\n'
        b'data: "delta":{"type":"text_delta","text":"two lines"}}\n\n',
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"x"}}\nid: 5\n\n',
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"x"}} \n\n',
        b'event: content_block_delta\ndata: {"index":0,"delta":{"type":"text_delta","text":"x"},'
        b'"type":"content_block_delta"}\n\n',
        b'event: content_block_delta\ndata:  {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"x"}}\n\n',
    ],
    "responses/vllm_stream.txt": [
        b'event: response.output_text.delta\ndata: {"content_index":0,"delta":" x","item_id":"m",'
        b'"logprobs":[],"output_index":0,"sequence_number":5,"type":"response.output_text.done"}\n\n',
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","content_index":0,'
        b'"delta":" x","item_id":"m","logprobs":[],"output_index":0,"sequence_number":5}\n\n',
        b'event: response.output_text.delta\ndata: {"content_index":0,"delta":" x","item_id":"m",'
        b'"logprobs":[],"output_index":0,\ndata: "sequence_number":5,"type":"response.output_text.delta"}\n\n',
        b'event: response.output_text.delta\n: a comment\ndata: {"content_index":0,"delta":" x","item_id":"m",'
        b'"logprobs":[],"output_index":0,"sequence_number":5,"type":"response.output_text.delta"}\n\n',
        b'event: response.output_text.delta\ndata: {"content_index":0,"delta":" x","item_id":"m",'
        b'"logprobs":[],"output_index":0,"sequence_number":5,"type":"response.output_text.delta"}\n\n\n',
    ],
}


@pytest.mark.parametrize("name", sorted(DISGUISED))
def test_a_named_run_holds_only_token_events(name: str) -> None:
    """An event among the token events that is not one of them, however little it differs (its
    payload's type, a second line, a field line of its own, a space), is read as the full reading
    reads it, wherever it falls and however the reads are cut; the bytes go out all the same."""
    factory, path, _, tokens = STREAMS[name]
    rng = random.Random(name)
    data = lengthened((FIX / name).read_bytes().rstrip(b"\n") + b"\n\n", path, rng)
    events = [e + b"\n\n" for e in data[:-2].split(b"\n\n")]
    token_at = [i for i, e in enumerate(events) if tokens(e)]
    for disguise in DISGUISED[name]:
        for _ in range(6):
            at = rng.choice(token_at[1:-1])
            damaged = b"".join([*events[:at], disguise, *events[at + 1 :]])
            reference = relayed(factory(None), damaged, [], whole=True)
            assert relayed(factory(None), damaged, []) == reference, disguise
            cuts = sorted(rng.sample(range(1, len(damaged)), k=rng.randint(1, 4)))
            assert relayed(factory(None), damaged, cuts) == reference, (disguise, cuts)


# Events that read like the quiet ones of a Responses stream (nothing in them the reading needs)
# and are not, or are framed otherwise: each is read the full way, and the quiet ones around it
# still go out as they came.
LOUD = [
    # A kind the reading needs, named where the payload's own type is not.
    b'event: response.output_item.added\ndata: {"item":{"id":"m","type":"response.completed"},'
    b'"output_index":0,"sequence_number":3,"type":"response.output_item.added"}\n\n',
    b'event: response.content_part.done\ndata: {"type":"response.output_text.delta","delta":"hid",'
    b'"content_index":0,"item_id":"m","output_index":0,"sequence_number":3}\n\n',
    b'event: error\ndata: {"type":"error","code":"server_error","message":"boom","param":null,"sequence_number":3}\n\n',
    # Framed otherwise: a comment, an id, two data lines, a stray line, a CR, a blank line more,
    # no space after the colon, an event without data.
    b'event: response.content_part.added\n: a comment\ndata: {"content_index":0,"item_id":"m",'
    b'"output_index":0,"part":{"type":"output_text","text":""},"sequence_number":3,'
    b'"type":"response.content_part.added"}\n\n',
    b'event: response.content_part.added\nid: 7\ndata: {"content_index":0,"item_id":"m",'
    b'"output_index":0,"sequence_number":3,"type":"response.content_part.added"}\n\n',
    b'event: response.content_part.added\ndata: {"content_index":0,"item_id":"m",\n'
    b'data: "output_index":0,"sequence_number":3,"type":"response.content_part.added"}\n\n',
    b"Internal Server Error\n\n",
    b'event: response.content_part.added\r\ndata: {"content_index":0,"item_id":"m",'
    b'"output_index":0,"sequence_number":3,"type":"response.content_part.added"}\r\n\r\n',
    b'event: response.content_part.added\ndata: {"content_index":0,"item_id":"m",'
    b'"output_index":0,"sequence_number":3,"type":"response.content_part.added"}\n\n\n',
    b'event: response.content_part.added\ndata:{"content_index":0,"item_id":"m",'
    b'"output_index":0,"sequence_number":3,"type":"response.content_part.added"}\n\n',
    b"event: response.content_part.added\n\n",
    # A response inside, which a rename or a previous response's name changes.
    b'event: response.output_item.done\ndata: {"item":{"id":"m","type":"message"},"response":'
    b'{"id":"r","model":"tiny","output":[]},"output_index":0,"sequence_number":3,'
    b'"type":"response.output_item.done"}\n\n',
]


@pytest.mark.parametrize("rename", [None, NAME])
@pytest.mark.parametrize("previous", [None, b'"resp_1"'])
def test_quiet_events_go_out_in_runs_as_reading_each_gives(rename: bytes | None, previous: bytes | None) -> None:
    """A Responses pass-through relays its quiet events (the items and parts opening and closing,
    the text done) in runs, undecoded; an event among them that the reading needs, or that is
    framed otherwise, is read the full way, wherever it falls and however the reads are cut."""
    rng = random.Random(f"{rename!r}{previous!r}")
    recorded = (FIX / "responses/vllm_stream.txt").read_bytes()
    data = lengthened(recorded.rstrip(b"\n") + b"\n\n", "delta", rng)
    events = [e + b"\n\n" for e in data[:-2].split(b"\n\n")]
    quiet = [i for i, e in enumerate(events) if b"_part." in e or b"_item." in e or b"text.done" in e]
    assert len(quiet) == 5

    def parser() -> ResponsesStreamParser:
        return ResponsesStreamParser(True, rename, previous)

    # The stream as it came: its quiet events go out in runs (the opening ones in one frame, the
    # closing ones in another).
    frames = [e.payload for e in parser().feed(data) if type(e) is Frame]
    assert any((events[quiet[0]] + events[quiet[1]]) in f for f in frames)
    assert b"".join(events[quiet[2] : quiet[4] + 1]) in frames
    assert relayed(parser(), data, []) == relayed(parser(), data, [], whole=True)
    for loud in LOUD:
        for _ in range(4):
            at = rng.choice(quiet) + rng.randint(0, 1)
            damaged = b"".join([*events[:at], loud, *events[at:]])
            reference = relayed(parser(), damaged, [], whole=True)
            assert relayed(parser(), damaged, []) == reference, loud
            cuts = sorted(rng.sample(range(1, len(damaged)), k=rng.randint(1, 4)))
            assert relayed(parser(), damaged, cuts) == reference, (loud, cuts)
