"""Images in chat content: passed to the backends whose wire takes them, in that wire's form (the
URL as the client gave it: the gateway never fetches one), and refused with a 400 naming the
backend where the wire carries only text, never left out on the way."""

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import one_route
from tests.support import raw_reply

FIXTURES = Path(__file__).parent / "fixtures"
URL = "https://example.com/cat.png"
DATA = "data:image/png;base64,iVBORw0KGgo="


def chat(url: str = URL, **more: Any) -> dict[str, Any]:
    parts = [{"type": "text", "text": "What is in this picture?"}, {"type": "image_url", "image_url": {"url": url}}]
    return {"model": "m", "messages": [{"role": "user", "content": parts}], **more}


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(
    ("dialect", "extra", "ask"),
    [
        ("tgi", {}, {}),
        ("triton", {"model": "m"}, {}),
        ("triton", {"model": "m", "options": {"flavor": "vllm"}}, {}),
        ("mindie", {"model": "m", "tool_parser": "hermes"}, {"tools": TOOLS}),
    ],
)
async def test_an_image_is_refused_by_a_backend_that_carries_only_text(
    upstream, make_gateway, tokenizer_folder, dialect, extra, ask
):
    gw = await make_gateway(one_route("openai", dialect, upstream.url, tokenizer=tokenizer_folder, **extra))
    r = await gw.post("/v1/chat/completions", json=chat(**ask))
    assert r.status == 400
    err = (await r.json())["error"]
    assert "backend 'up'" in err["message"] and "image_url" in err["message"]
    assert err["param"] == "messages"
    assert not upstream.requests


async def test_text_parts_alone_reach_a_text_backend(upstream, make_gateway, tokenizer_folder):
    upstream.reply = raw_reply(b'{"generated_text": "a cat", "details": {"finish_reason": "eos_token"}}')
    gw = await make_gateway(one_route("openai", "tgi", upstream.url, tokenizer=tokenizer_folder))
    body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"}]}]}
    assert (await gw.post("/v1/chat/completions", json=body)).status == 200
    assert "What is it?" in upstream.last.json["inputs"]


def openai_answer() -> Any:
    return raw_reply((FIXTURES / "openai" / "chat_response.json").read_bytes())


async def test_mindies_openai_route_gets_the_image_as_its_plain_string(upstream, make_gateway):
    upstream.reply = openai_answer()
    gw = await make_gateway(one_route("openai", "mindie", upstream.url, model="m"))
    assert (await gw.post("/v1/chat/completions", json=chat())).status == 200
    part = upstream.last.json["messages"][0]["content"][1]
    assert part == {"type": "image_url", "image_url": URL}


async def test_databricks_gets_the_image_part_as_it_came(upstream, make_gateway):
    upstream.reply = openai_answer()
    gw = await make_gateway(one_route("openai", "databricks", upstream.url, model="m"))
    assert (await gw.post("/v1/chat/completions", json=chat())).status == 200
    assert upstream.last.json["messages"][0]["content"][1] == {"type": "image_url", "image_url": {"url": URL}}


async def test_anthropic_gets_image_blocks(upstream, make_gateway):
    upstream.reply = raw_reply((FIXTURES / "anthropic" / "sdk_message.json").read_bytes())
    gw = await make_gateway(one_route("openai", "anthropic", upstream.url))
    assert (await gw.post("/v1/chat/completions", json=chat())).status == 200
    assert upstream.last.json["messages"][0]["content"][1] == {"type": "image", "source": {"type": "url", "url": URL}}
    assert (await gw.post("/v1/chat/completions", json=chat(DATA))).status == 200
    source = upstream.last.json["messages"][0]["content"][1]["source"]
    assert source == {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


async def test_a_part_the_anthropic_wire_has_no_block_for_is_refused(upstream, make_gateway):
    gw = await make_gateway(one_route("openai", "anthropic", upstream.url))
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, audio]}]}
    r = await gw.post("/v1/chat/completions", json=body)
    assert r.status == 400 and "input_audio" in (await r.json())["error"]["message"]
    assert not upstream.requests


async def test_the_responses_api_gets_an_input_image(upstream, make_gateway):
    upstream.reply = raw_reply((FIXTURES / "responses" / "vllm_response.json").read_bytes())
    gw = await make_gateway(one_route("openai", "responses", upstream.url))
    assert (await gw.post("/v1/chat/completions", json=chat())).status == 200
    part = upstream.last.json["input"][0]["content"][1]
    assert part["type"] == "input_image" and part["image_url"] == URL


async def test_an_anthropic_clients_image_reaches_an_openai_server_as_an_image_url_part(upstream, make_gateway):
    upstream.reply = openai_answer()
    gw = await make_gateway(one_route("anthropic", "openai", upstream.url, options={"extensions": "vllm"}))
    image = {"type": "image", "source": {"type": "url", "url": URL}}
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [image]}]}
    assert (await gw.post("/v1/messages", json=body)).status == 200
    assert upstream.last.json["messages"][0]["content"] == [{"type": "image_url", "image_url": {"url": URL}}]
