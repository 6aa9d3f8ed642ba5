"""The plain create body's quick judgement (responses.schema.plain_request) against the model.

plain_request lets a body past without building ResponsesRequest, so it must never pass one the
model refuses, and what the gateway reads of a body must not depend on which way it went."""

import random
from typing import Any

import pytest

from gateway.dialects.responses import inbound
from gateway.dialects.responses.schema import _PLAIN, ResponsesRequest, plain_request
from tests.plain_kit import field_by_field, judged, read_alike

BASE: dict[str, Any] = {"model": "m", "input": "hi"}
VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 2, 20, 21, 2**63 - 1, 0.0, 0.5, 1.0, 1.5, 2.0, 2.0000001, -0.5,
    "", "x", "auto", [], ["a"], ["message.output_text.logprobs"], [1], {}, {"a": "b"}, {"a": 1},
    {"effort": "low"}, {"format": {"type": "text"}}, {"include_obfuscation": False},
    [{"type": "message", "role": "user", "content": "hi"}], [{"role": "user"}],
]  # fmt: skip
FIELDS = sorted(ResponsesRequest.model_fields)


@pytest.mark.parametrize("field", sorted(_PLAIN.checks))
def test_each_checked_field_passes_only_what_the_model_accepts(field: str) -> None:
    field_by_field(field, VALUES, BASE, plain_request, ResponsesRequest)


def test_random_bodies_never_pass_what_the_model_refuses() -> None:
    rng = random.Random(20261127)

    def body() -> dict[str, Any]:
        data: dict[str, Any] = {"model": rng.choice(["m", "m", "", 1, None]), "input": rng.choice(["hi", "", 5, None])}
        for key in rng.sample(FIELDS, rng.randint(0, 4)) + rng.sample(["an_extra", "x"], rng.randint(0, 1)):
            data[key] = rng.choice(VALUES)
        return data

    passed, refused = judged((body() for _ in range(20_000)), plain_request, ResponsesRequest)
    assert passed > 500 and refused > 5_000, (passed, refused)


def test_what_the_gateway_reads_does_not_depend_on_the_way(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = [
        BASE,
        {**BASE, "instructions": "Be brief", "stream": True, "store": False, "max_output_tokens": 64},
        {**BASE, "temperature": 0.2, "top_p": 0.9, "user": "u", "include": ["message.output_text.logprobs"]},
        {**BASE, "top_logprobs": 3, "include": ["message.output_text.logprobs"], "parallel_tool_calls": False},
        {**BASE, "safety_identifier": "s", "service_tier": "auto", "prompt_cache_key": "k", "an_extra": [1]},
    ]
    read_alike(bodies, inbound.parse, inbound, "plain_request", monkeypatch)


def test_what_codex_sends_asks_the_model() -> None:
    """Input items, tools, reasoning and text settings are the model's to judge."""
    assert not plain_request({**BASE, "input": [{"type": "message", "role": "user", "content": "hi"}]})
    assert not plain_request({**BASE, "tools": []})
    assert not plain_request({**BASE, "reasoning": {"effort": "low"}})
    assert not plain_request({**BASE, "text": {"format": {"type": "text"}}})
    assert not plain_request({**BASE, "stream_options": {"include_obfuscation": False}})
