"""Stream events written from byte templates (the per-token fast paths of the renderers) are
byte for byte what the wire shapes say, for every kind of text and token id."""

import itertools
import json
import random

import pytest

from gateway import jsonutil
from gateway.codec import frames
from gateway.codec.contract import RenderContext
from gateway.dialects.mindie import render as mindie
from gateway.dialects.openai import render as openai
from gateway.dialects.openai import stream as openai_stream
from gateway.dialects.tgi import render as tgi
from gateway.dialects.tgi.inbound import FLAVOUR as TGI
from gateway.neutral.events import Event, FinishEvent, TextDelta, TextRun, UsageEvent, expand
from gateway.neutral.types import Finish, Request, Task, Usage

TEXTS = [" The", "", ' "quoted"', "back\\slash", "café 😀", "line\nbreak", "\u2028", "\x00"]
IDS = [None, [5], [5, 6]]


def compact(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("flavour", [TGI, mindie.TGI_STYLE])
def test_tgi_token_events(flavour: tgi.Flavour) -> None:
    req = Request(task=Task.COMPLETION, wire="tgi", prompt="p", stream=True)
    renderer = tgi.TGIStreamRenderer(flavour, req, RenderContext("r", 1, "m"))
    n = 0
    for text in TEXTS:
        for ids in IDS:
            token = {"id": tgi.ids_value(ids, flavour.unknown_id, flavour.id_lists), "text": text}
            event = {"token": token | {"logprob": None, "special": False}, "generated_text": None, "details": None}
            if flavour.index:
                n += 1
                event = {"index": n} | event
            framing = b"data: " if flavour.space else b"data:"
            assert renderer.token_frame(TextDelta(text, 0, None, ids), 1.5) == framing + compact(event) + b"\n\n"


def test_mindie_native_token_events() -> None:
    req = Request(task=Task.COMPLETION, wire="mindie", prompt="p", stream=True)
    renderer = mindie.NativeStreamRenderer(req, RenderContext("r", 1, "m"))
    first = True
    for text in TEXTS:
        for ids in IDS:
            for ms in (0.0, 0.004, 12.3456, 1234567.891):
                timing = {"prefill_time": round(ms, 2), "decode_time": None}
                if not first:
                    timing = {"prefill_time": None, "decode_time": round(ms, 2)}
                first = False
                event = timing | {"token": {"id": tgi.ids_value(ids, None), "text": text}}
                assert renderer.token_frame(TextDelta(text, 0, None, ids), ms) == b"data: " + compact(event) + b"\n\n"


@pytest.mark.parametrize("flavour", [openai.OPENAI, mindie.OPENAI_ROUTES])
@pytest.mark.parametrize("task", [Task.CHAT, Task.COMPLETION])
def test_openai_text_chunks_follow_the_general_rules(flavour: openai.Flavour, task: Task) -> None:
    """The text template against the general rules, which render a text with logprobs
    attached (so not from the template) the same way but for the logprobs (the template itself
    is cut from what the general rules give for a marker text)."""
    req = Request(task=task, wire="openai", model="m", stream=True)
    renderer = openai_stream.ChunkStream(flavour, req, RenderContext("r", 1, "m"))
    for text in TEXTS:
        fast = json.loads(renderer.render([TextDelta(text)])[6:])
        general = json.loads(renderer.render([TextDelta(text, 0, [])])[6:])
        general["choices"][0].pop("logprobs", None)
        fast["choices"][0].pop("logprobs", None)
        assert fast == general
        got = fast["choices"][0]["delta"]["content"] if task is Task.CHAT else fast["choices"][0]["text"]
        assert got == text


# ---- a run of texts (TextRun) renders as its deltas would ----------------------------------


def _renderers(ctx: RenderContext) -> dict[str, object]:
    from gateway.dialects.anthropic import render as anthropic
    from gateway.dialects.databricks import render as databricks
    from gateway.dialects.responses import stream as responses
    from gateway.dialects.triton import render as triton
    from gateway.neutral.params import Params

    def req(task: Task, inbound: str, n: int = 1) -> Request:
        return Request(task=task, wire=inbound, model="m", prompt="p", stream=True, params=Params(n=n))

    return {
        "openai chat": openai_stream.ChunkStream(openai.OPENAI, req(Task.CHAT, "openai", 2), ctx),
        "openai completion": openai_stream.ChunkStream(openai.OPENAI, req(Task.COMPLETION, "openai"), ctx),
        "mindie chat": openai_stream.ChunkStream(mindie.OPENAI_ROUTES, req(Task.CHAT, "mindie", 2), ctx),
        "databricks chat": openai_stream.ChunkStream(databricks.FLAVOUR, req(Task.CHAT, "databricks"), ctx),
        "tgi": tgi.TGIStreamRenderer(TGI, req(Task.COMPLETION, "tgi"), ctx),
        "mindie tgi-style": tgi.TGIStreamRenderer(mindie.TGI_STYLE, req(Task.COMPLETION, "mindie"), ctx),
        "mindie native": mindie.NativeStreamRenderer(req(Task.COMPLETION, "mindie"), ctx),
        "mindie vllm-style": mindie.VllmStreamRenderer(req(Task.COMPLETION, "mindie", 2), ctx),
        "triton": triton.TritonStreamRenderer(req(Task.COMPLETION, "triton"), ctx),
        "responses": responses.ResponseStream(req(Task.CHAT, "responses"), ctx),
        "anthropic": anthropic.stream_renderer(req(Task.CHAT, "anthropic"), ctx),
    }


RUN_READS = [
    [TextRun([" The", ' "quoted"', "café 😀"])],
    [TextDelta("a", 0, None, [7]), TextRun(["b", "\n", "c"]), TextRun(["p", "q"], 1)],
    [TextRun(["d", "e"]), FinishEvent(Finish.LENGTH), TextRun(["r", "s"], 1), FinishEvent(Finish.EOS, 1)],
    # A text that ends in a backslash, or holds the list separator: encoded one by one.
    [TextRun(["ends in \\", 'holds ","', "x"]), TextRun(["", "y"])],
    # Runs whose tokens name their ids (TGI's and MindIE's streams): one id, several, none at 0.
    [TextRun(["i", "j", "k"], 0, [11, 12, 0]), TextDelta("h", 0, None, [12, 13]), TextRun(["t", "u"], 1, [21, 22])],
    [TextRun(["l", "m"], 0, [14, 15]), TextDelta("n", 0, None, []), FinishEvent(Finish.STOP_STRING)],
    [UsageEvent(Usage(3, 12))],
]


@pytest.mark.parametrize("in_band", [True, False])
@pytest.mark.parametrize("name", list(_renderers(RenderContext("r", 1, "m"))))
def test_a_run_of_texts_renders_as_its_deltas(name: str, in_band: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stream renderer writes a TextRun (a template run's texts) byte for byte as the
    text deltas it stands for, whether a finish rides with its last text or each is held
    back; the clock MindIE's timings read ticks the same for both."""
    outputs = []
    for expanded in (False, True):
        ticks = itertools.count(1)
        monkeypatch.setattr(tgi.time, "perf_counter", lambda ticks=ticks: next(ticks) / 1000)
        monkeypatch.setattr(mindie, "_ids", itertools.count(1))  # MindIE's chunk ids count up
        r = _renderers(RenderContext("r", 1, "m", started=0.0005, finish_in_band=in_band))[name]
        out = r.start()  # type: ignore[attr-defined]
        for read in RUN_READS:
            out += r.render(expand(read) if expanded else read)  # type: ignore[attr-defined]
        outputs.append(out + r.end())  # type: ignore[attr-defined]
    assert outputs[0] == outputs[1]
    assert b"caf" in outputs[0] and b"\\n" in outputs[0]


def test_texts_encoded_together_are_each_texts_json_string() -> None:
    """jsonutil.strings_joined: the same bytes as encoding each text on its own and joining,
    whatever the texts hold (quotes, backslashes, the list's own separator, control characters)."""
    rng = random.Random(7)
    alphabet = ['"', "\\", ",", '","', "a", " ", "é", "😀", "\n", "\x00", "\u2028", "\\u"]
    between = b'},"x":1}\n\ndata: {"t":'
    for _ in range(10_000):
        texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 3))) for _ in range(rng.randint(1, 6))]
        assert jsonutil.strings_joined(texts, between) == between.join(map(jsonutil.dumps, texts)), texts


def test_texts_cut_from_one_encoding_are_each_texts_json_string() -> None:
    """jsonutil.string_contents: each text's JSON string without its quotes, or None."""
    rng = random.Random(11)
    alphabet = ['"', "\\", ",", '","', "a", " ", "é", "😀", "\n", "\x00", "\u2028", "\\u"]
    cut = 0
    for _ in range(10_000):
        texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 3))) for _ in range(rng.randint(1, 6))]
        contents = jsonutil.string_contents(texts)
        if contents is not None:
            cut += 1
            assert [b'"' + c + b'"' for c in contents] == list(map(jsonutil.dumps, texts)), texts
    assert cut > 1_000
    assert jsonutil.string_contents([]) is None


@pytest.mark.parametrize("name", ["tgi", "mindie tgi-style", "mindie native"])
def test_random_runs_with_ids_render_as_their_deltas(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's frames are laid out from the template's pieces and joined once (gateway.codec.frames),
    its ids and positions encoded together: the same bytes as each delta written on its own, for
    any mix of texts and ids (a run's one each, or none; between runs, tokens of several ids, or
    an empty list, or none)."""
    rng = random.Random(23)
    alphabet = ['"', "\\", ",", '","', "],[", "a", " ", "é", "😀", "\n", "\x00", "%b", "%d"]
    choices: list[list[int] | None] = [[5], [150_000], [0], [7, 8], [], None]
    for _ in range(300):
        reads: list[list[Event]] = []
        for _ in range(rng.randint(1, 4)):
            size = rng.randint(2, 7)  # a run is two texts or more
            texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 3))) for _ in range(size)]
            ids = None if rng.random() < 0.2 else [rng.choice([5, 150_000, 0]) for _ in range(size)]
            read: list[Event] = [TextRun(texts, 0, ids)]
            if rng.random() < 0.5:
                read.insert(rng.randint(0, 1), TextDelta(rng.choice(alphabet), 0, None, rng.choice(choices)))
            reads.append(read)
        outputs = []
        for expanded in (False, True):
            ticks = itertools.count(1)
            monkeypatch.setattr(tgi.time, "perf_counter", lambda ticks=ticks: next(ticks) / 1000)
            monkeypatch.setattr(mindie, "_ids", itertools.count(1))
            r = _renderers(RenderContext("r", 1, "m", started=0.0005))[name]
            out = r.start()  # type: ignore[attr-defined]
            for read in reads:
                out += r.render(expand(read) if expanded else read)  # type: ignore[attr-defined]
            outputs.append(out + r.end())  # type: ignore[attr-defined]
        assert outputs[0] == outputs[1], reads


def test_frames_filled_from_a_template_are_the_template_formatted() -> None:
    """gateway.codec.frames: each row is what `template % row` gives, the rows joined; the holes'
    count is checked; jsonutil.numbers and jsonutil.counted write each integer as JSON does."""
    template = b'data:{"index":%d,"id":%b,"text":%b}\n\n'
    pieces = frames.template_pieces(template, 3)
    rng = random.Random(5)
    for rows in range(1, 6):
        values = [
            (rng.randint(0, 10**6), b"%d" % rng.randint(-5, 5), jsonutil.dumps(str(rng.random()))) for _ in range(rows)
        ]
        columns = [jsonutil.numbers([v[0] for v in values]), [v[1] for v in values], [v[2] for v in values]]
        assert frames.filled(pieces, columns) == b"".join(template % v for v in values)
    # The texts in the last hole, cut from one encoding or (a quote, a comma) encoded each.
    for texts in (["a", "b c"], ['say "hi"', "x"], ["a,b", ","], ["é", "\n"]):
        ids = [b"%d" % n for n in range(len(texts))]
        rows = enumerate(zip(ids, texts, strict=True))
        expected = b"".join(template % (n, i, jsonutil.dumps(t)) for n, (i, t) in rows)
        assert frames.filled_texts(pieces, [jsonutil.numbers(list(range(len(texts)))), ids], texts) == expected
    with pytest.raises(ValueError):
        frames.template_pieces(template, 2)
    assert jsonutil.numbers([]) == []
    assert jsonutil.numbers([0, -3, 2**40]) == [b"0", b"-3", b"1099511627776"]
    # A run's positions, from the numbers counted so far or past them.
    for first, stop in [(0, 0), (5, 9), (0, 300), (250, 700), (-2, 3), (16_380, 16_390), (3, 1)]:
        assert jsonutil.counted(first, stop) == [b"%d" % n for n in range(first, stop)], (first, stop)
