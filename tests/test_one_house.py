"""The defects the restructure removed, each shown on the wire, and the rules of the neutral form.

- A MindIE client on a MindIE backend lost parameters the backend cannot take without being told
  (the fate policy was skipped because the dialect names matched, yet the request was translated).
- A fanned-out request's upstream time was the first part's, not the slowest's: overhead was
  overstated by the difference.
- Tokens that came in the same read as a malformed Triton event were lost.
- Content parts were joined with "" for a Databricks backend and with "\\n" for a chat template,
  so two backends got different prompts for one message.
"""

import asyncio
from typing import Any

import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from gateway import jsonutil
from gateway.codec.wirenames import WireNames
from gateway.dialects.triton.families import VLLM_READING
from gateway.dialects.triton.reading import CallState, TritonStreamParser
from gateway.neutral.errors import UpstreamError
from gateway.neutral.events import TextDelta
from gateway.neutral.params import NAMES, ROLES, SPECS, Params, Role, make
from gateway.neutral.types import Message, Request, Task
from gateway.proxy.plan import fan_out
from tests.conftest import one_route
from tests.fixtures.openai.wire import raw
from tests.support import Recorded, json_reply


async def test_a_same_dialect_mindie_route_names_what_its_backend_cannot_take(upstream, make_gateway):
    answer = {"generated_text": " ok", "details": {"finish_reason": "length", "generated_tokens": 1}}
    upstream.reply = json_reply(answer)
    gw = await make_gateway(one_route("mindie", "mindie", upstream.url))
    body = {"inputs": "hi", "parameters": {"max_new_tokens": 4, "truncate": 5, "top_k": 3}}
    resp = await gw.post("/generate", json=body)
    assert resp.status == 200
    # MindIE's native /infer has no truncate: dropped, and said so, as for any other client.
    assert resp.headers["X-Gateway-Dropped-Params"] == "truncate"
    assert upstream.last.path == "/infer"
    assert "truncate" not in upstream.last.json["parameters"]
    assert upstream.last.json["parameters"]["top_k"] == 3
    tgi_gw = await make_gateway(one_route("tgi", "mindie", upstream.url))
    resp = await tgi_gw.post("/generate", json=body)
    assert resp.headers["X-Gateway-Dropped-Params"] == "truncate"


def _sum(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"{name} not found")


async def test_fanned_out_upstream_time_is_the_slowest_part(upstream, make_gateway):
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        # The parts answer at different speeds; the slowest takes half a second.
        await asyncio.sleep(0.5 if rec.json["parameters"].get("seed") == 12 else 0.05)
        body = {"generated_text": " ok", "details": {"finish_reason": "length", "generated_tokens": 1}}
        return web.Response(body=jsonutil.dumps(body), content_type="application/json")

    upstream.reply = reply
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "a", "n": 3, "seed": 10, "max_tokens": 1})
    assert resp.status == 200
    assert len(upstream.requests) == 3
    text = await (await gw.get("/metrics")).text()
    upstream_s = _sum(text, "gateway_upstream_duration_seconds_sum")
    overhead_s = _sum(text, "gateway_overhead_seconds_sum")
    assert upstream_s >= 0.5
    # The gateway's own share is milliseconds; before, the slow part's wait was counted here.
    assert overhead_s < 0.25


def test_tokens_before_a_malformed_triton_event_in_the_same_read_are_delivered():
    parser = TritonStreamParser(CallState(VLLM_READING, "prompt", 16))
    read = b'data: {"text_output": "Hello", "finish_reason": "None"}\n\ndata: {not json\n\n'
    assert parser.feed(read) == [TextDelta("Hello")]
    with pytest.raises((UpstreamError, ValueError)):
        parser.feed(b"")


async def test_content_parts_read_the_same_for_every_text_backend(upstream, make_gateway, tokenizer_folder):
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    message = Message("user", parts)
    assert message.text() == "first\nsecond"
    upstream.reply = json_reply(jsonutil.loads(raw("chat_response.json")))
    cfg = one_route("openai", "databricks", upstream.url, model="endpoint")
    gw = await make_gateway(cfg)
    body = {"model": "m", "messages": [{"role": "user", "content": parts}]}
    assert (await gw.post("/v1/chat/completions", json=body)).status == 200
    assert upstream.last.json["messages"][0]["content"] == "first\nsecond"
    # A chat template that does not walk content parts sees the same text.
    from gateway.adapters.template import ChatTemplate

    tpl = ChatTemplate({"default": "{% for m in messages %}[{{ m.content }}]{% endfor %}"})
    assert tpl.render([message]) == "[first\nsecond]"


# ---- the neutral form's rules ------------------------------------------------------------------


def test_every_parameter_has_a_role_and_a_type():
    assert set(ROLES) == set(NAMES) == set(SPECS)
    assert all(r in (Role.HINT, Role.CONTRACT) for r in ROLES.values())
    assert all(spec.doc for spec in SPECS.values())
    assert Params() == tuple([None] * len(NAMES))  # "not set" is None for every parameter


def test_requests_params_and_events_do_not_change_once_built():
    p = make({"stop": "x", "n": 1, "temperature": 0.5})
    assert p.stop == ("x",) and p.n is None  # the dialects' ways of saying "the default" made one
    req = Request(task=Task.COMPLETION, wire="openai", prompt=["a", "b"], params=p.replace(n=2, seed=7))
    # (A request is a record: test_code_quality shows the type checker refusing an assignment.)
    with pytest.raises(AttributeError):
        p.temperature = 1.0  # type: ignore[misc]
    ev = TextDelta("a")
    with pytest.raises(AttributeError):
        ev.index = 3  # type: ignore[misc]
    # Fan-out makes copies: two prompts x two choices, seeds counted up per choice.
    parts = fan_out(req, ["a", "b"], 2)
    assert [(r.prompt, r.params.n, r.params.seed) for r in parts] == [("a", None, 7), ("a", None, 8)] * 1 + [
        ("b", None, 7),
        ("b", None, 8),
    ]
    assert req.prompt == ["a", "b"] and req.params.n == 2 and req.params.seed == 7


def test_wire_names_are_neutral_parameters_both_ways():
    names = WireNames([("temperature", "temperature"), ("max_new_tokens", "max_tokens"), ("stop_words", "stop")])
    assert names.read({"max_new_tokens": 5, "stop_words": ["a"], "other": 1}) == {"max_tokens": 5, "stop": ("a",)}
    assert names.write(Params(max_tokens=5, stop=("a",), top_k=3)) == {"max_new_tokens": 5, "stop_words": ["a"]}
    assert names.carried == {"temperature", "max_tokens", "stop"}
    with pytest.raises(ValueError, match="not a neutral parameter"):
        WireNames([("max_new_tokens", "max_new_tokens")])


def _every_dialect_wire_names() -> list[Any]:
    from gateway.dialects.databricks import params as databricks
    from gateway.dialects.mindie import params as mindie
    from gateway.dialects.openai import params as openai
    from gateway.dialects.tgi import params as tgi
    from gateway.dialects.triton import params as triton

    return [v for m in (databricks, mindie, openai, tgi, triton) for v in vars(m).values() if isinstance(v, WireNames)]


def test_each_dialect_declares_its_names_as_data():
    tables = _every_dialect_wire_names()
    assert len(tables) >= 15
    assert all(t.carried <= set(NAMES) for t in tables)


# ---- a parameter added by one registry row and the wire names of the dialects that have it ------


@pytest.mark.parametrize(
    ("backend", "options", "carried"),
    # (An OpenAI client on the public API is a same-wire route: its body goes as it is.)
    [("openai", {"extensions": "vllm"}, True), ("tgi", {}, False), ("mindie", {}, False)],
)
async def test_min_tokens_reaches_backends_that_take_it_and_is_named_where_dropped(
    upstream, make_gateway, backend, options, carried
):
    answers = {
        "openai": jsonutil.loads(raw("chat_response.json")),
        "tgi": {"generated_text": " ok", "details": {"finish_reason": "length", "generated_tokens": 1}},
        "mindie": {"generated_text": " ok", "details": {"finish_reason": "length", "generated_tokens": 1}},
    }
    if backend == "openai":
        answers["openai"] = {
            "id": "c",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}],
        }
    upstream.reply = json_reply(answers[backend])
    gw = await make_gateway(one_route("openai", backend, upstream.url, options=options))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 8, "min_tokens": 4})
    assert resp.status == 200
    sent = upstream.last.json
    if carried:
        assert sent["min_tokens"] == 4
        assert "X-Gateway-Dropped-Params" not in resp.headers
    else:
        assert "min_tokens" not in jsonutil.dumps_str(sent)
        assert resp.headers["X-Gateway-Dropped-Params"] == "min_tokens"


async def test_min_tokens_from_a_triton_client_to_triton_vllm_and_an_openai_client(upstream, make_gateway):
    upstream.reply = json_reply({"model_name": "m", "model_version": "1", "text_output": " ok"})
    gw = await make_gateway(one_route("openai", "triton", upstream.url, options={"flavor": "vllm"}))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "hi", "min_tokens": 4})
    assert resp.status == 200
    assert jsonutil.loads(upstream.last.json["sampling_parameters"])["min_tokens"] == 4
    # A Triton client says it in `parameters`; an OpenAI backend of the vLLM kind gets it.
    upstream.reply = json_reply(
        {
            "id": "c",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}],
        }
    )
    gw = await make_gateway(one_route("triton", "openai", upstream.url, options={"extensions": "vllm"}))
    body = {"text_input": "hi", "parameters": {"max_tokens": 8, "min_tokens": 3}}
    assert (await gw.post("/v2/models/m/generate", json=body)).status == 200
    assert upstream.last.json["min_tokens"] == 3
    # The public API has no min_tokens: a hint, so dropped and named.
    gw = await make_gateway(one_route("triton", "openai", upstream.url))
    resp = await gw.post("/v2/models/m/generate", json=body)
    assert resp.status == 200
    assert resp.headers["X-Gateway-Dropped-Params"] == "min_tokens"
    assert "min_tokens" not in upstream.last.json
