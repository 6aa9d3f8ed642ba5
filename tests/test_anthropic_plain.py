"""The plain Messages request's quick judgement (anthropic.schema.plain_messages) against the
model: never a pass the model refuses, and the same request read either way."""

import random
from typing import Any

import pytest

from gateway.dialects.anthropic import inbound
from gateway.dialects.anthropic.schema import _PLAIN, MessagesRequest, plain_messages
from tests.plain_kit import field_by_field, judged, read_alike

BASE: dict[str, Any] = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 2, 2**63 - 1, 0.0, 0.5, 1.0, 1.0000001, -0.5, "", "x", [], ["a"], [1], {},
    {"user_id": "u"}, [{"type": "text", "text": "s"}], {"type": "enabled", "budget_tokens": 1024},
]  # fmt: skip
MESSAGES: list[Any] = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": ""},
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi", "extra": 1},
    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "4"}]},
    {"role": "user", "content": None},
    {"role": "tool", "content": "4"},
    {"role": "User", "content": "hi"},
    {"content": "hi"},
    "hi",
]
FIELDS = sorted(MessagesRequest.model_fields)


@pytest.mark.parametrize("field", sorted(_PLAIN.checks))
def test_each_checked_field_passes_only_what_the_model_accepts(field: str) -> None:
    field_by_field(field, VALUES, BASE, plain_messages, MessagesRequest)


def test_random_requests_never_pass_what_the_model_refuses() -> None:
    rng = random.Random(20261127)

    def body() -> dict[str, Any]:
        data: dict[str, Any] = {
            "model": rng.choice(["m", "m", "", 1]),
            "max_tokens": rng.choice([16, 16, 0, "16"]),
            "messages": rng.sample(MESSAGES, rng.randint(1, 2)),
        }
        for key in rng.sample(FIELDS, rng.randint(0, 3)) + rng.sample(["an_extra", "x"], rng.randint(0, 1)):
            data[key] = rng.choice(VALUES)
        return data

    passed, refused = judged((body() for _ in range(20_000)), plain_messages, MessagesRequest)
    assert passed > 200 and refused > 5_000, (passed, refused)


def test_what_the_gateway_reads_does_not_depend_on_the_way(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = [
        BASE,
        {**BASE, "system": "Be brief", "stream": True, "temperature": 0.2, "top_k": 5, "top_p": 0.9},
        {**BASE, "stop_sequences": ["END"], "metadata": None, "an_extra": [1]},
        {
            **BASE,
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "again"},
            ],
        },
    ]
    read_alike(bodies, inbound.parse_messages, inbound, "plain_messages", monkeypatch)
    assert not plain_messages({key: value for key, value in BASE.items() if key != "max_tokens"})
