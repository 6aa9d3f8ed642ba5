"""The real `openai` SDK as a client of the gateway: against the embedded default (simulated
backends) and against a FakeUpstream answering with the wire fixtures."""

from typing import Any

import openai
import pytest

from gateway.app import create_app
from gateway.configfile import embedded_default
from tests.conftest import one_route
from tests.fixtures.openai.wire import load, raw
from tests.support import json_reply, raw_reply, sse_reply

MSGS: list[Any] = [{"role": "user", "content": "hello there gateway"}]


def sdk(client: Any, key: str = "sk-test") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=key, base_url=str(client.make_url("/v1")), max_retries=0, timeout=10)


def frames(name: str) -> list[bytes]:
    return [f + b"\n\n" for f in raw(name).split(b"\n\n") if f]


@pytest.fixture
async def default_gw(aiohttp_client: Any) -> Any:
    return await aiohttp_client(create_app(embedded_default()))


async def test_sdk_chat_on_embedded_default(default_gw):
    async with sdk(default_gw) as c:
        r = await c.chat.completions.create(model="any", messages=MSGS, max_tokens=50)
        assert r.object == "chat.completion"
        # Same dialect: the backend's answer passes through, under the name the client used.
        assert r.model == "any"
        assert r.choices[0].message.role == "assistant"
        assert r.choices[0].message.content == (
            "Simulated answer 0: you said hello there gateway. The gateway works end to end."
        )
        assert r.choices[0].finish_reason == "stop"
        assert r.usage is not None and r.usage.prompt_tokens == 3
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


async def test_sdk_chat_stream_on_embedded_default(default_gw):
    async with sdk(default_gw) as c:
        whole = (await c.chat.completions.create(model="any", messages=MSGS)).choices[0].message.content
        chunks = [ch async for ch in await c.chat.completions.create(model="any", messages=MSGS, stream=True)]
        assert chunks[0].choices[0].delta.role == "assistant"
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == whole
        assert chunks[-1].choices[0].finish_reason == "stop"
        assert all(ch.usage is None for ch in chunks)
        assert len({ch.id for ch in chunks}) == 1

        stream = await c.chat.completions.create(
            model="any", messages=MSGS, stream=True, stream_options={"include_usage": True}
        )
        chunks = [ch async for ch in stream]
        assert chunks[-1].choices == []
        assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 3
        assert chunks[-2].choices[0].finish_reason == "stop"


async def test_sdk_completions_embeddings_models_on_embedded_default(default_gw):
    async with sdk(default_gw) as c:
        r = await c.completions.create(model="any", prompt="say something", max_tokens=4)
        assert r.object == "text_completion"
        assert r.choices[0].finish_reason == "length"
        assert r.usage is not None and r.usage.completion_tokens == 4
        text = "".join(
            [
                ch.choices[0].text
                async for ch in await c.completions.create(
                    model="any", prompt="say something", max_tokens=4, stream=True
                )
                if ch.choices
            ]
        )
        assert text == r.choices[0].text

        floats = await c.embeddings.create(model="any", input=["a b", "c"], encoding_format="float")
        assert len(floats.data) == 2 and [d.index for d in floats.data] == [0, 1]
        assert all(isinstance(x, float) for x in floats.data[0].embedding)
        # The SDK's default asks for base64 and decodes it itself: same vectors.
        b64 = await c.embeddings.create(model="any", input=["a b", "c"])
        for got, want in zip(b64.data, floats.data, strict=True):
            assert got.embedding == pytest.approx(want.embedding, abs=1e-6)

        models = [m.id async for m in c.models.list()]
        assert "sim-model" in models


async def test_sdk_against_fixture_upstream(upstream, make_gateway):
    # A vLLM-style server takes top_k: it goes on in the forwarded body.
    gw = await make_gateway(
        one_route("openai", "openai", upstream.url, model="up-model", options={"extensions": "vllm"})
    )
    async with sdk(gw) as c:
        upstream.reply = raw_reply(raw("chat_response_tool_calls.json"))
        r = await c.chat.completions.create(
            model="gpt-4o-mini",
            messages=MSGS,
            tools=load("chat_request.json")["tools"],
            extra_body={"top_k": 3},
        )
        assert r.choices[0].finish_reason == "tool_calls"
        calls = r.choices[0].message.tool_calls
        assert calls is not None
        assert [(t.id, t.function.name, t.function.arguments) for t in calls] == [
            ("call_abc123", "get_weather", '{\n"city": "Boston"\n}'),
            ("call_def456", "get_weather", '{"city": "Berlin"}'),
        ]
        sent = upstream.last.json
        assert sent["model"] == "up-model" and sent["top_k"] == 3
        assert sent["tools"] == load("chat_request.json")["tools"]

        upstream.reply = sse_reply(frames("chat_stream_tool_calls.sse"))
        chunks = [ch async for ch in await c.chat.completions.create(model="m", messages=MSGS, stream=True)]
        args = "".join(
            tc.function.arguments or ""
            for ch in chunks
            for tc in ch.choices[0].delta.tool_calls or ()
            if tc.index == 0 and tc.function is not None
        )
        assert args == '{"city": "Paris"}'
        assert chunks[-1].choices[0].finish_reason == "tool_calls"

        upstream.reply = sse_reply(frames("chat_stream.sse"))
        chunks = [ch async for ch in await c.chat.completions.create(model="m", messages=MSGS, stream=True)]
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == "Hello, w\u00f6rld \U0001f44b!"
        assert all(ch.choices for ch in chunks)
        chunks = [
            ch
            async for ch in await c.chat.completions.create(
                model="m", messages=MSGS, stream=True, stream_options={"include_usage": True}
            )
        ]
        assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 13

        for name in ("embedding_response.json", "embedding_response_base64.json"):
            upstream.reply = json_reply(load(name))
            e = await c.embeddings.create(model="e", input=["x", "y"], encoding_format="float")
            vectors = sorted((d.index, d.embedding) for d in e.data)
            if name == "embedding_response.json":
                assert vectors == [(0, [0.5, -0.25, 0.125]), (1, [1.0, 0.0, -1.5])]


@pytest.mark.parametrize(
    ("status", "fixture", "exc"),
    [
        (400, "error_invalid_request.json", openai.BadRequestError),
        (404, "error_model_not_found.json", openai.NotFoundError),
        (429, "error_rate_limit.json", openai.RateLimitError),
        (500, "error_server.json", openai.InternalServerError),
        (503, "error_server.json", openai.InternalServerError),
    ],
)
async def test_sdk_error_classes(upstream, make_gateway, status, fixture, exc):
    upstream.reply = raw_reply(raw(fixture), status=status)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    async with sdk(gw) as c:
        with pytest.raises(exc) as ei:
            await c.chat.completions.create(model="m", messages=MSGS)
        assert ei.value.status_code == status
        assert load(fixture)["error"]["message"] in ei.value.message


async def test_sdk_gateway_side_errors(upstream, make_gateway):
    cfg = one_route("openai", "openai", upstream.url)
    cfg["routes"][0]["models"] = ["only"]
    cfg["auth"] = {"api_keys": ["good"]}
    gw = await make_gateway(cfg)
    async with sdk(gw, "bad") as c:
        with pytest.raises(openai.AuthenticationError):
            await c.chat.completions.create(model="only", messages=MSGS)
    async with sdk(gw, "good") as c:
        with pytest.raises(openai.NotFoundError) as ei:
            await c.chat.completions.create(model="other", messages=MSGS)
        assert ei.value.code == "model_not_found"
        with pytest.raises(openai.BadRequestError) as bi:
            await c.chat.completions.create(model="only", messages=MSGS, temperature=3)
        assert bi.value.param == "temperature"
    assert upstream.requests == []


async def test_sdk_raises_on_in_band_stream_error(upstream, make_gateway):
    upstream.reply = sse_reply(frames("chat_stream_error.sse"))
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    async with sdk(gw) as c:
        seen: list[str] = []
        with pytest.raises(openai.APIError) as ei:
            async for ch in await c.chat.completions.create(model="m", messages=MSGS, stream=True):
                seen.append(ch.choices[0].delta.content or "")
        assert "".join(seen) == "Par"
        assert "The server had an error" in ei.value.message

        # Truncated upstream stream: the SDK raises too instead of ending quietly.
        upstream.reply = sse_reply(frames("chat_stream.sse")[:3])
        with pytest.raises(openai.APIError):
            async for _ in await c.chat.completions.create(model="m", messages=MSGS, stream=True):
                pass
