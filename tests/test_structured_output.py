"""Structured output: a response format reaches each backend in the form it takes (TGI's grammar,
TRT-LLM's guided decoding inputs, the vLLM backend's sampling parameters, the OpenAI-shaped
routes' own field, Anthropic's output format, the Responses API's text format), the other ways
clients ask for JSON are read into it, and a backend that cannot hold its output to it refuses
the request, naming itself: a response format is never dropped."""

from pathlib import Path
from typing import Any

import pytest

from gateway import jsonutil
from tests.conftest import one_route
from tests.support import json_reply, raw_reply

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
AS_SCHEMA = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}
FIXTURES = Path(__file__).parent / "fixtures"


def chat(**more: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "the year after 2024?"}], **more}


def tgi_answer() -> Any:
    return json_reply({"generated_text": '{"answer": 2025}', "details": {"finish_reason": "eos_token"}})


async def test_a_schema_reaches_tgi_as_a_json_grammar(upstream, make_gateway, tokenizer_folder):
    upstream.reply = tgi_answer()
    gw = await make_gateway(one_route("openai", "tgi", upstream.url, tokenizer=tokenizer_folder))
    r = await gw.post("/v1/chat/completions", json=chat(response_format=AS_SCHEMA))
    assert r.status == 200 and (await r.json())["choices"][0]["message"]["content"] == '{"answer": 2025}'
    assert upstream.last.json["parameters"]["grammar"] == {"type": "json", "value": SCHEMA}
    await gw.post("/v1/chat/completions", json=chat(response_format={"type": "json_object"}))
    assert upstream.last.json["parameters"]["grammar"] == {"type": "json", "value": {"type": "object"}}
    await gw.post("/v1/chat/completions", json=chat(response_format={"type": "text"}))
    assert "grammar" not in upstream.last.json["parameters"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("guided_json", SCHEMA),
        ("guided_json", jsonutil.dumps_str(SCHEMA)),
        ("structured_outputs", {"json": SCHEMA}),
    ],
)
async def test_vllms_json_forms_reach_tgi_as_its_grammar(upstream, make_gateway, tokenizer_folder, field, value):
    upstream.reply = tgi_answer()
    gw = await make_gateway(one_route("openai", "tgi", upstream.url, tokenizer=tokenizer_folder))
    r = await gw.post("/v1/chat/completions", json=chat(**{field: value}))
    assert r.status == 200
    assert upstream.last.json["parameters"]["grammar"] == {"type": "json", "value": SCHEMA}


async def test_a_tgi_grammar_reaches_an_openai_style_server_as_its_response_format(upstream, make_gateway):
    upstream.reply = raw_reply((FIXTURES / "openai" / "completion_response.json").read_bytes())
    gw = await make_gateway(one_route("tgi", "openai", upstream.url, options={"extensions": "vllm"}))
    grammar = {"type": "json", "value": SCHEMA}
    r = await gw.post("/generate", json={"inputs": "the year after 2024?", "parameters": {"grammar": grammar}})
    assert r.status == 200
    assert upstream.last.json["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": SCHEMA},
    }


async def test_a_regex_grammar_is_refused_not_dropped(upstream, make_gateway):
    gw = await make_gateway(one_route("tgi", "openai", upstream.url, options={"extensions": "vllm"}))
    grammar = {"type": "regex", "value": "[0-9]+"}
    r = await gw.post("/generate", json={"inputs": "a number", "parameters": {"grammar": grammar}})
    assert r.status == 422 and "grammar" in (await r.json())["error"]
    assert not upstream.requests


async def test_anthropics_output_format_reaches_tgi_as_its_grammar(upstream, make_gateway, tokenizer_folder):
    upstream.reply = tgi_answer()
    gw = await make_gateway(one_route("anthropic", "tgi", upstream.url, tokenizer=tokenizer_folder))
    body = {
        "model": "m",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "the year after 2024?"}],
        "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
    }
    r = await gw.post("/v1/messages", json=body)
    assert r.status == 200
    assert upstream.last.json["parameters"]["grammar"] == {"type": "json", "value": SCHEMA}


def triton_answer() -> Any:
    return json_reply({"model_name": "m", "model_version": "1", "text_output": '{"answer": 2025}'})


async def test_trtllm_gets_guided_decoding_inputs(upstream, make_gateway, tokenizer_folder):
    upstream.reply = triton_answer()
    gw = await make_gateway(one_route("openai", "triton", upstream.url, model="m", tokenizer=tokenizer_folder))
    assert (await gw.post("/v1/chat/completions", json=chat(response_format=AS_SCHEMA))).status == 200
    sent = upstream.last.json
    assert sent["guided_decoding_guide_type"] == "json_schema"
    assert jsonutil.loads(sent["guided_decoding_guide"]) == SCHEMA
    await gw.post("/v1/chat/completions", json=chat(response_format={"type": "json_object"}))
    assert upstream.last.json["guided_decoding_guide_type"] == "json"
    assert "guided_decoding_guide" not in upstream.last.json


async def test_the_vllm_backend_gets_structured_outputs_in_its_sampling_parameters(
    upstream, make_gateway, tokenizer_folder
):
    upstream.reply = triton_answer()
    opts = {"flavor": "vllm"}
    gw = await make_gateway(
        one_route("openai", "triton", upstream.url, model="m", tokenizer=tokenizer_folder, options=opts)
    )
    assert (await gw.post("/v1/chat/completions", json=chat(response_format=AS_SCHEMA))).status == 200
    sampling = jsonutil.loads(upstream.last.json["sampling_parameters"])
    assert jsonutil.loads(sampling["structured_outputs"]) == {"json": SCHEMA}


async def test_a_triton_client_asking_for_json_reaches_an_openai_style_server(upstream, make_gateway):
    upstream.reply = raw_reply((FIXTURES / "openai" / "completion_response.json").read_bytes())
    gw = await make_gateway(one_route("triton", "openai", upstream.url, options={"extensions": "vllm"}))
    body = {"text_input": "a year", "max_tokens": 8, "guided_decoding_guide_type": "json"}
    assert (await gw.post("/v2/models/m/generate", json=body)).status == 200
    assert upstream.last.json["response_format"] == {"type": "json_object"}


async def test_mindie_takes_a_response_format_on_its_openai_routes(upstream, make_gateway):
    upstream.reply = raw_reply((FIXTURES / "openai" / "chat_response.json").read_bytes())
    gw = await make_gateway(one_route("openai", "mindie", upstream.url, model="m"))
    assert (await gw.post("/v1/chat/completions", json=chat(response_format=AS_SCHEMA))).status == 200
    assert upstream.last.path == "/v1/chat/completions" and upstream.last.json["response_format"] == AS_SCHEMA
    upstream.reply = raw_reply((FIXTURES / "openai" / "completion_response.json").read_bytes())
    grammar = {"type": "json", "value": SCHEMA}
    gw = await make_gateway(
        {
            "backends": {"up": {"dialect": "mindie", "url": upstream.url, "model": "m"}},
            "routes": [{"name": "r", "dialect": "tgi", "backend": "up"}],
        }
    )
    r = await gw.post("/generate", json={"inputs": "a year", "parameters": {"grammar": grammar}})
    assert r.status == 200
    # A completion held to a schema goes to the route that takes one, not to /infer.
    assert upstream.last.path == "/v1/completions" and upstream.last.json["response_format"]["type"] == "json_schema"


@pytest.mark.parametrize(
    ("dialect", "extra"),
    [
        ("triton", {"model": "m", "options": {"flavor": "mindie"}}),
        ("mindie", {"model": "m", "tool_parser": "hermes"}),
    ],
)
async def test_a_backend_that_cannot_hold_its_output_refuses_a_response_format(
    upstream, make_gateway, tokenizer_folder, dialect, extra
):
    gw = await make_gateway(one_route("openai", dialect, upstream.url, tokenizer=tokenizer_folder, **extra))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    r = await gw.post("/v1/chat/completions", json=chat(response_format=AS_SCHEMA, tools=tools))
    assert r.status == 400
    message = (await r.json())["error"]["message"]
    assert "backend 'up'" in message and "response_format" in message
    assert not upstream.requests


async def test_anthropic_gets_the_schema_as_its_output_format(upstream, make_gateway):
    upstream.reply = raw_reply((FIXTURES / "anthropic" / "sdk_message.json").read_bytes())
    gw = await make_gateway(one_route("openai", "anthropic", upstream.url))
    assert (await gw.post("/v1/chat/completions", json=chat(response_format=AS_SCHEMA))).status == 200
    assert upstream.last.json["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    r = await gw.post("/v1/chat/completions", json=chat(response_format={"type": "json_object"}))
    assert r.status == 400 and "backend 'up'" in (await r.json())["error"]["message"]


async def test_the_responses_api_gets_the_schema_as_its_text_format(upstream, make_gateway):
    upstream.reply = raw_reply((FIXTURES / "responses" / "vllm_response.json").read_bytes())
    gw = await make_gateway(one_route("openai", "responses", upstream.url))
    assert (await gw.post("/v1/chat/completions", json=chat(response_format=AS_SCHEMA))).status == 200
    fmt = upstream.last.json["text"]["format"]
    assert fmt["type"] == "json_schema" and fmt["schema"] == SCHEMA
