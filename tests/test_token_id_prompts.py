"""Token ids from a client are checked before they are used: against the vocabulary of the
tokenizer that turns them into text for a text-only backend, and against the range MindIE's
`/infer_token` takes. The first id that does not fit is named in a 4xx in the client's dialect;
nothing reaches the backend, nothing is a 500. Ids a backend sends back that its tokenizer lacks
are shown without their texts."""

import json
import logging
from typing import Any

import pytest

from tests.conftest import one_route
from tests.support import json_reply

# The test tokenizer's ids are 0 to 557.
LAST = 557
TEXT_BACKENDS = {
    "triton": {"model": "m"},
    "tgi": {},
    "databricks": {"model": "m"},
}


@pytest.mark.parametrize("backend", list(TEXT_BACKENDS))
@pytest.mark.parametrize(
    ("prompt", "bad"),
    [
        ([239457247291, 7431, 67556, 44665], 239457247291),  # past what the library can hold
        ([5, LAST + 1, 2**32], LAST + 1),  # past the vocabulary, within 32 bits
        ([5, 2**64 - 1], 2**64 - 1),  # the largest a JSON body may hold
        ([[5, 6], [7, 2**40]], 2**40),  # the second prompt of a batch
    ],
)
async def test_an_openai_prompt_id_past_the_vocabulary_is_a_400_naming_it(
    upstream, make_gateway, tokenizer_folder, caplog, backend, prompt, bad
):
    config = one_route("openai", backend, upstream.url, tokenizer=tokenizer_folder, **TEXT_BACKENDS[backend])
    gw = await make_gateway(config)
    with caplog.at_level(logging.WARNING):
        resp = await gw.post("/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": 4})
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["param"] == "prompt" and err["code"] == "invalid_token_id"
    assert f"token id {bad} " in err["message"] and f"0 to {LAST}" in err["message"]
    assert upstream.requests == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_the_vocabularys_last_id_goes_through(upstream, make_gateway, tokenizer_folder):
    upstream.reply = json_reply({"generated_text": "x", "details": {"finish_reason": "length", "generated_tokens": 1}})
    gw = await make_gateway(one_route("openai", "tgi", upstream.url, tokenizer=tokenizer_folder))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": [0, LAST], "max_tokens": 1})
    assert resp.status == 200
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("path", ["/infer_token", "/infer"])
async def test_a_mindie_input_id_past_the_vocabulary_is_a_422_naming_it(upstream, make_gateway, tokenizer_folder, path):
    gw = await make_gateway(one_route("mindie", "triton", upstream.url, tokenizer=tokenizer_folder, model="m"))
    resp = await gw.post(path, json={"input_id": [5, 7431, 9000], "parameters": {"max_new_tokens": 4}})
    assert resp.status == 422
    body = await resp.json()
    assert body["error_type"] == "Input Validation Error"
    assert body["error"].startswith("token id 7431 in the prompt is not in the vocabulary of backend 'up'")
    assert upstream.requests == []


@pytest.mark.parametrize("bad", [0, 1, 1024 * 1024 + 1, 239457247291])
async def test_ids_outside_mindies_range_never_reach_its_infer_token(upstream, make_gateway, bad):
    gw = await make_gateway(one_route("openai", "mindie", upstream.url))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": [5, bad, 7], "max_tokens": 4})
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["param"] == "prompt" and f"token id {bad} in the prompt" in err["message"]
    assert "(1, 1048576]" in err["message"]
    assert upstream.requests == []


async def test_ids_within_mindies_range_reach_its_infer_token(upstream, make_gateway):
    upstream.reply = json_reply({"generated_text": "x", "details": {"finish_reason": "length", "generated_tokens": 1}})
    gw = await make_gateway(one_route("openai", "mindie", upstream.url))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": [2, 1024 * 1024], "max_tokens": 1})
    assert resp.status == 200
    assert upstream.last.path == "/infer_token" and upstream.last.json["input_id"] == [2, 1024 * 1024]


ODD_IDS: list[Any] = [
    [-1, 5],
    [2**70],
    [-(2**70)],
    [1.5, 3],
    [5.0],
    [True, 5],
    [False],
    [5, None],
    [5, "6"],
    [],
    [[]],
    [[5, []]],
    [[5], 6],
    [[[5]]],
    {"0": 5},
]
# Each inbound route that takes token ids, as (client dialect, path, body for ids).
ID_ROUTES = {
    "openai completions": ("openai", "/v1/completions", lambda ids: {"model": "m", "prompt": ids, "max_tokens": 4}),
    "mindie /infer_token": ("mindie", "/infer_token", lambda ids: {"input_id": ids}),
    "mindie /infer": ("mindie", "/infer", lambda ids: {"input_id": ids}),
    "mindie completions": ("mindie", "/v1/completions", lambda ids: {"model": "m", "prompt": ids, "max_tokens": 4}),
    "openai embeddings": ("openai", "/v1/embeddings", lambda ids: {"model": "m", "input": ids}),
}


@pytest.mark.parametrize("backend", ["triton", "tgi", "databricks", "mindie", "openai"])
@pytest.mark.parametrize("route", list(ID_ROUTES))
async def test_odd_token_ids_are_a_4xx_on_every_route_that_takes_ids(
    upstream, make_gateway, tokenizer_folder, caplog, route, backend
):
    client, path, body = ID_ROUTES[route]
    upstream.reply = json_reply({"error": "the backend must not be asked"}, status=500)
    options = {"model": "m"} if backend in ("triton", "databricks") else {}
    gw = await make_gateway(one_route(client, backend, upstream.url, tokenizer=tokenizer_folder, **options))
    with caplog.at_level(logging.WARNING):
        for ids in ODD_IDS:
            resp = await gw.post(path, data=json.dumps(body(ids)))
            assert 400 <= resp.status < 500, (ids, resp.status, await resp.text())
    assert upstream.requests == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("ids", [[2**40], [-3], [5, LAST + 1]])
async def test_a_backends_token_ids_its_tokenizer_lacks_come_without_texts(
    upstream, make_gateway, tokenizer_folder, ids
):
    choice = {"index": 0, "text": "hi", "token_ids": ids, "logprobs": None, "finish_reason": "length"}
    upstream.reply = json_reply(
        {"id": "c", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}
    )
    route = one_route("tgi", "openai", upstream.url, tokenizer=tokenizer_folder, options={"extensions": "vllm"})
    gw = await make_gateway(route)
    resp = await gw.post("/generate", json={"inputs": "x", "parameters": {"details": True}})
    assert resp.status == 200
    tokens = (await resp.json())["details"]["tokens"]
    assert [(t["id"], t["text"]) for t in tokens] == [(i, "") for i in ids]


async def test_token_ids_a_backend_sends_as_no_list_of_ids_are_none(upstream, make_gateway, tokenizer_folder):
    choice = {"index": 0, "text": "hi", "token_ids": ["x"], "logprobs": None, "finish_reason": "length"}
    upstream.reply = json_reply(
        {"id": "c", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}
    )
    route = one_route("tgi", "openai", upstream.url, tokenizer=tokenizer_folder, options={"extensions": "vllm"})
    gw = await make_gateway(route)
    resp = await gw.post("/generate", json={"inputs": "x", "parameters": {"details": True}})
    assert resp.status == 200
    # The ids are the tokenizer's reading of the text instead.
    assert [t["text"] for t in (await resp.json())["details"]["tokens"]] == ["h", "i"]
