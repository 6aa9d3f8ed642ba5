"""The plain chat request's quick judgement (schema.plain_chat) against ChatCompletionRequest.

plain_chat lets a request past without building the pydantic model, so it must never pass one
the model refuses, and what the gateway reads from a request must not depend on which way it
went. Every field it checks is tried at and past its limits, with the wrong types, and in random
mixtures.
"""

import random
from typing import Any

import pytest

from gateway.dialects.openai import inbound
from gateway.dialects.openai.schema import _PLAIN_FIELDS, ChatCompletionRequest, plain_chat
from tests.plain_kit import accepted, judged, read_alike

BASE: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

# Values every field meets: each side of every limit the schema has, and each JSON type.
VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 2, 3, 4, 5, 20, 21, 128, 129, -2, -3, 2**63 - 1, -(2**63),
    0.0, 0.5, 1.0, 1.5, 2.0, 2.0000001, -2.0, -2.0000001, 5e-324, -0.0, 1e308,
    "", "x", "stop", [], ["a"], ["a", "b", "c", "d"], ["a", "b", "c", "d", "e"], [1, 2], [0], [-1], [True],
    [1.0], {}, {"include_usage": True}, {"include_usage": False}, {"include_usage": None},
    {"include_usage": 1}, {"include_usage": "yes"}, {"other": 1}, {"enable_thinking": False},
    "auto", "none", "required", "Auto", {"type": "function", "function": {"name": "f"}},
]  # fmt: skip
# Tools lists: function tools at and past their limits, and what is not one.
FUNCTION = {"name": "get_weather", "description": "Weather now", "parameters": {"type": "object"}, "strict": True}
TOOLS: list[Any] = [
    [{"type": "function", "function": FUNCTION}],
    [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g", "x": 1}}],
    [{"type": "function", "function": {"name": "f" * 64}}],
    [{"type": "function", "function": {"name": "f" * 65}}],
    [{"type": "function", "function": {"name": ""}}],
    [{"type": "function", "function": {"name": 1}}],
    [{"type": "function", "function": {}}],
    [{"type": "function", "function": {**FUNCTION, "description": 5}}],
    [{"type": "function", "function": {**FUNCTION, "description": None, "parameters": None, "strict": None}}],
    [{"type": "function", "function": {**FUNCTION, "parameters": []}}],
    [{"type": "function", "function": {**FUNCTION, "parameters": "{}"}}],
    [{"type": "function", "function": {**FUNCTION, "strict": 1}}],
    [{"type": "function", "function": FUNCTION, "extra": [1]}],
    [{"type": "custom", "function": FUNCTION}],
    [{"type": ["function"], "function": FUNCTION}],
    [{"function": FUNCTION}],
    [{"type": "function"}],
    [{"type": "function", "function": "f"}],
    [{"type": "function", "function": FUNCTION}, None],
    ["f"],
]
VALUES += TOOLS
CALL = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
MESSAGES: list[Any] = [
    {"role": "user", "content": "hi"},
    {"role": "system", "content": ""},
    {"role": "developer", "content": "be brief"},
    {"role": "assistant", "content": "hello", "name": "bot"},
    {"role": "user", "content": "hi", "name": None},
    {"role": "user", "content": "hi", "extra": [1, 2]},
    {"role": "user", "content": None},
    {"role": "assistant", "content": None},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "content": "42", "tool_call_id": "c"},
    {"role": "tool", "content": "42"},
    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    {"role": "user", "content": [{"type": "text"}]},
    {"role": "user", "content": 5},
    {"role": "User", "content": "hi"},
    {"role": 1, "content": "hi"},
    {"role": ["user"], "content": "hi"},
    {"role": "user", "content": "hi", "name": 3},
    {"role": "user", "content": "hi", "tool_call_id": "x"},
    {"content": "hi"},
    "hi",
    None,
    # An agent's turns: tool calls and their results, and what is not one.
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "assistant", "content": "let me look", "tool_calls": [CALL, {**CALL, "id": "c2"}]},
    {"role": "assistant", "content": "", "tool_calls": []},
    {"role": "assistant", "content": None, "tool_calls": []},
    {"role": "assistant", "tool_calls": [CALL]},
    {"role": "assistant", "content": None, "tool_calls": [{**CALL, "type": None}]},
    {"role": "assistant", "content": None, "tool_calls": [{**CALL, "type": "custom"}]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": 1}]},
    {"role": "assistant", "content": None, "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {}}}]},
    {"role": "assistant", "content": None, "tool_calls": [{**CALL, "function": {"name": "f"}}]},
    {"role": "assistant", "content": None, "tool_calls": [{**CALL, "function": {"name": None, "arguments": "{}"}}]},
    {"role": "assistant", "content": None, "tool_calls": [{**CALL, "extra": 1}]},
    {"role": "assistant", "content": None, "tool_calls": [CALL], "tool_call_id": "c"},
    {"role": "assistant", "content": None, "tool_calls": CALL},
    {"role": "assistant", "content": None, "tool_calls": [None]},
    {"role": "user", "content": "hi", "tool_calls": [CALL]},
    {"role": "tool", "content": "42", "tool_call_id": "c", "name": "f"},
    {"role": "tool", "content": "42", "tool_call_id": ""},
    {"role": "tool", "content": None, "tool_call_id": "c"},
    {"role": "tool", "content": "42", "tool_call_id": 5},
    {"role": "tool", "content": "42", "tool_call_id": "c", "tool_calls": [CALL]},
    {"role": "tool", "content": [{"type": "text", "text": "42"}], "tool_call_id": "c"},
    {"role": "function", "content": "42", "name": "f"},
]
OTHER_KEYS = ["logit_bias", "response_format", "an_extra"]


@pytest.mark.parametrize("field", sorted(_PLAIN_FIELDS))
def test_each_checked_field_passes_only_what_the_model_accepts(field: str) -> None:
    passed = 0
    for value in VALUES:
        for extra in ({}, {"stream": True}, {"logprobs": True}):
            data = {**BASE, **extra, field: value}
            if plain_chat(data):
                passed += 1
                assert accepted(ChatCompletionRequest, data), (
                    f"plain_chat passed {field}={value!r} with {extra}, the model refuses it"
                )
    assert passed, f"no value of {field} was judged plain"


def test_messages_pass_only_as_the_model_takes_them() -> None:
    for msg in MESSAGES:
        for messages in ([msg], [{"role": "user", "content": "a"}, msg]):
            data = {**BASE, "messages": messages}
            assert not plain_chat(data) or accepted(ChatCompletionRequest, data), messages
    assert not plain_chat({**BASE, "messages": []})
    assert not plain_chat({**BASE, "messages": {"role": "user"}})
    assert not plain_chat({"messages": BASE["messages"]})
    assert not plain_chat({**BASE, "model": ""})
    assert not plain_chat({**BASE, "model": 5})


def test_random_requests_never_pass_what_the_model_refuses() -> None:
    rng = random.Random(20261124)
    fields = sorted(_PLAIN_FIELDS)

    def body() -> dict[str, Any]:
        data: dict[str, Any] = {"model": rng.choice(["m", "m", "m", "", 1, None]), "messages": [rng.choice(MESSAGES)]}
        if rng.random() < 0.05:
            data.pop("model")
        for key in rng.sample(fields, rng.randint(0, 3)) + rng.sample(OTHER_KEYS, rng.randint(0, 1)):
            data[key] = rng.choice(VALUES)
        return data

    passed, refused = judged((body() for _ in range(20_000)), plain_chat, ChatCompletionRequest)
    # Not vacuous: many were judged plain, many refused.
    assert passed > 300 and refused > 5_000, (passed, refused)


def test_what_the_gateway_reads_does_not_depend_on_the_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same neutral request whether plain_chat let it past or the model was built."""
    bodies = [
        BASE,
        {**BASE, "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.7, "max_tokens": 64},
        {**BASE, "stream": False, "logprobs": True, "top_logprobs": 3, "seed": 7, "stop": ["\n", "END"]},
        {**BASE, "stream": True, "stream_options": {"include_usage": None}, "n": 2, "user": "u", "top_p": 1},
        {
            "model": "x",
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u", "name": "n"}],
            "chat_template_kwargs": {"enable_thinking": False},
            "logprobs": False,
            "min_p": 0.1,
            "top_k": -1,
            "an_extra": {"kept": True},
        },
        {**BASE, "tools": TOOLS[0], "tool_choice": "required", "parallel_tool_calls": True, "stream": True},
        {**BASE, "tools": TOOLS[1], "tool_choice": "none"},
        {
            **BASE,
            "tools": TOOLS[0],
            "messages": [
                {"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "content": "sunny", "tool_call_id": "c"},
            ],
        },
    ]
    read_alike(bodies, inbound.parse_chat, inbound, "plain_chat", monkeypatch)


def test_what_clients_send_is_plain() -> None:
    """The openai SDK's and LangChain's usual chat requests take the quick way."""
    assert plain_chat(
        {
            "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
            "model": "gpt-4o-mini",
            "max_tokens": 256,
            "n": 1,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.7,
        }
    )
    assert plain_chat({**BASE, "max_completion_tokens": 100, "seed": 1, "top_p": 0.9, "presence_penalty": 0.5})
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert plain_chat({**BASE, "tools": tools, "tool_choice": "auto", "parallel_tool_calls": False})
    assert not plain_chat({**BASE, "tool_choice": "auto"})
    assert not plain_chat({**BASE, "tools": [], "tool_choice": "required"})
    assert not plain_chat({**BASE, "tools": tools, "tool_choice": {"type": "function", "function": {"name": "f"}}})
