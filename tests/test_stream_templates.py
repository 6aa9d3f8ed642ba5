"""Stream events written from byte templates (the per-token fast paths of the renderers) are
byte for byte what the wire shapes say, for every kind of text and token id."""

import json

import pytest

from gateway.codec.contract import RenderContext
from gateway.dialects.mindie import render as mindie
from gateway.dialects.openai import render as openai
from gateway.dialects.tgi import render as tgi
from gateway.dialects.tgi.inbound import FLAVOUR as TGI
from gateway.neutral.events import TextDelta
from gateway.neutral.types import Request, Task

TEXTS = [" The", "", ' "quoted"', "back\\slash", "café 😀", "line\nbreak", "\u2028", "\x00"]
IDS = [None, [5], [5, 6]]


def compact(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("flavour", [TGI, mindie.TGI_STYLE])
def test_tgi_token_events(flavour: tgi.Flavour) -> None:
    req = Request(task=Task.COMPLETION, inbound="tgi", prompt="p", stream=True)
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
    req = Request(task=Task.COMPLETION, inbound="mindie", prompt="p", stream=True)
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
    req = Request(task=task, inbound="openai", model="m", stream=True)
    renderer = openai.ChunkStream(flavour, req, RenderContext("r", 1, "m"))
    for text in TEXTS:
        fast = json.loads(renderer.render([TextDelta(text)])[6:])
        general = json.loads(renderer.render([TextDelta(text, 0, [])])[6:])
        general["choices"][0].pop("logprobs", None)
        fast["choices"][0].pop("logprobs", None)
        assert fast == general
        got = fast["choices"][0]["delta"]["content"] if task is Task.CHAT else fast["choices"][0]["text"]
        assert got == text
