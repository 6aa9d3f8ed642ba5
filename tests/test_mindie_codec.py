"""MindIE codecs against payloads MindIE sends and takes (tests/fixtures/mindie): parsing, rendering,
outbound stream parsing."""

from pathlib import Path
from typing import Any

import pytest

from gateway import jsonutil
from gateway.codec.contract import BackendView
from gateway.dialects.mindie import inbound
from gateway.dialects.mindie.outbound import Options, native_body
from gateway.dialects.mindie.reading import FullTextParser
from gateway.dialects.openai.reading import OpenAIStreamParser
from gateway.dialects.tgi.reading import GenerateStreamParser
from gateway.neutral.errors import InvalidRequest, UpstreamError
from gateway.neutral.events import FinishEvent, TextDelta, UsageEvent, expand
from gateway.neutral.params import Params
from gateway.neutral.types import Finish

FIX = Path(__file__).parent / "fixtures" / "mindie"


def fixture(name: str) -> bytes:
    return (FIX / name).read_bytes()


def parse_all(parser: Any, body: bytes, step: int | None = None) -> list[Any]:
    events: list[Any] = []
    if step is None:
        events += parser.feed(body)
    else:
        for i in range(0, len(body), step):
            events += parser.feed(body[i : i + step])
    return events + parser.close()


def test_an_infer_token_request_reads_into_neutral_params() -> None:
    req = inbound.parse_infer(fixture("infer_token_request.json"))
    assert req.prompt_ids == [5618, 19678, 701, 9072, 13]
    assert req.stream is False
    assert dict(req.params.items()) == {
        "max_tokens": 20,
        "temperature": 0.5,
        "top_k": 10,
        "top_p": 0.95,
        "typical_p": 0.5,
        "do_sample": True,
        "repetition_penalty": 1.03,
        "watermark": False,
        "priority": 5,
        "timeout": 10,
    }


@pytest.mark.parametrize(
    "params",
    [
        {"top_p": 1.0},
        {"temperature": 0},
        {"top_k": 0},
        {"priority": 6},
        {"timeout": 3601},
        {"max_new_tokens": 0},
        {"typical_p": 1.5},
        {"seed": 0},
        {"do_sample": "yes"},
    ],
)
def test_native_ranges_rejected(params: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        inbound.parse_infer(jsonutil.dumps({"inputs": "hi", "parameters": params}))


@pytest.mark.parametrize(
    "body",
    [{"inputs": "a", "input_id": [5, 6]}, {}, {"input_id": []}, {"input_id": [1]}, {"input_id": ["5"]}],
)
def test_native_inputs_rejected(body: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        inbound.parse_infer(jsonutil.dumps(body))


@pytest.mark.parametrize("step", [None, 1, 7, 64])
def test_an_infer_token_stream_parses_however_it_is_cut(step: int | None) -> None:
    events = expand(parse_all(GenerateStreamParser(prompt_tokens=5), fixture("infer_token_stream.txt"), step))
    texts = [e for e in events if isinstance(e, TextDelta)]
    # Every token keeps its id, whether it was read alone or in a run of the stream's template.
    assert all(e.token_ids for e in texts)
    assert (
        "".join(e.text for e in texts)
        == "am a French photographer based in Paris.\nI have been shooting since I was 15"
    )
    # The final event's token has a null text: its piece is recovered from generated_text.
    assert texts[-1].text == "5" and texts[-1].token_ids == [29945]
    assert texts[0].token_ids == [626]
    fin = [e for e in events if isinstance(e, FinishEvent)]
    assert [f.reason for f in fin] == [Finish.LENGTH]
    usage = next(e for e in events if isinstance(e, UsageEvent)).usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (5, 20)


def test_stream_ids_as_lists_and_no_space() -> None:
    body = fixture("infer_token_stream.txt").replace(b"data: ", b"data:").replace(b'"id":626', b'"id":[626]')
    events = parse_all(GenerateStreamParser(), body)
    assert isinstance(events[0], TextDelta) and events[0].token_ids == [626]


@pytest.mark.parametrize("step", [None, 1, 37])
def test_a_run_whose_tokens_name_several_ids_reads_as_whole(step: int | None) -> None:
    """A run of token events read from the template takes each token's id as a number; where a
    token names a list of ids (or none), each keeps what it named, as when read whole."""
    events = fixture("infer_token_stream.txt").split(b"\n\n")
    lists = [
        e.replace(b'"id":', b'"id":[1,', 1).replace(b',"text"', b'],"text"', 1) if n % 3 == 1 else e
        for n, e in enumerate(events)
    ]
    for body in (b"\n\n".join(events), b"\n\n".join(lists)):
        whole = GenerateStreamParser()
        whole._chunks = None
        want = expand(parse_all(whole, body, step))
        got = expand(parse_all(GenerateStreamParser(), body, step))
        assert got == want
        assert [e.token_ids for e in got if isinstance(e, TextDelta)] == [
            e.token_ids for e in want if isinstance(e, TextDelta)
        ]


def test_midstream_raw_text_is_an_error() -> None:
    lines = fixture("infer_token_stream.txt").split(b"\n\n")
    body = b"\n\n".join(lines[:3]) + b"\n\nEngine callback timeout: client timeout"
    p = GenerateStreamParser()
    got = expand(p.feed(body))  # (a run of texts when an earlier stream's template fits)
    assert [e.text for e in got if isinstance(e, TextDelta)] == ["am", " a", " French"]
    with pytest.raises(UpstreamError) as exc:
        p.close()
    assert exc.value.upstream_class == "midstream" and "Engine callback timeout" in exc.value.message


def test_stream_without_final_event_is_truncated() -> None:
    lines = fixture("infer_token_stream.txt").split(b"\n\n")
    p = GenerateStreamParser()
    p.feed(b"\n\n".join(lines[:5]) + b"\n\n")
    with pytest.raises(UpstreamError, match="final event"):
        p.close()


def test_a_chat_stream_gives_usage_in_its_final_chunk() -> None:
    events = parse_all(OpenAIStreamParser(chat=True), fixture("chat_stream.txt"))
    assert [e.reason for e in events if isinstance(e, FinishEvent)] == [Finish.EOS]
    usage = next(e for e in events if isinstance(e, UsageEvent)).usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (54, 17)


def test_a_full_text_chat_stream_becomes_deltas() -> None:
    events = parse_all(FullTextParser(OpenAIStreamParser(chat=True)), fixture("chat_stream_full_text.txt"), 13)
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == ["Hello", "!", " How", " can", " I", " assist", " you", " today", "?"]
    assert [e.reason for e in events if isinstance(e, FinishEvent)] == [Finish.LENGTH]


def test_a_chat_request_reads_its_vendor_fields_and_media() -> None:
    req = inbound.parse_chat(fixture("chat_request.json"))
    assert req.wire == "mindie"
    assert req.params.top_k is None  # the request's top_k of 0 means "not set"
    assert req.params.stop == ("stop1", "stop2")
    assert req.params.stop_token_ids == (2, 13)
    assert req.params.repetition_penalty == 1.0
    assert req.params.max_tokens == 20
    mm = inbound.parse_chat(fixture("chat_request_multimodal.json"))
    assert mm.messages is not None
    assert mm.messages[0].content == [
        {"type": "text", "text": "My name is Olivier and I"},
        {"type": "image_url", "image_url": {"url": "/xxxx/test.png"}},
    ]


def test_native_body_never_sends_rejected_values() -> None:
    req = inbound.parse_infer(jsonutil.dumps({"inputs": "hi"}))
    req = req.but(params=Params(temperature=0, top_p=1.0))
    body = native_body(req, BackendView("m", "mindie", None, Options(default_max_tokens=77)))
    assert body == {
        "inputs": "hi",
        "stream": False,
        "parameters": {"max_new_tokens": 77, "do_sample": False, "details": True},
    }
