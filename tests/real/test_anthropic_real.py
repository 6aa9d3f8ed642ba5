"""The anthropic SDK through the gateway in front of real vLLM (as an OpenAI server and as a
Messages server) and real Triton, and vLLM's own /v1/messages bytes as an Anthropic client gets
them through the gateway."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.real.servers import Server
from tests.real.test_clients_real import TIMEOUT, Gateway, serve

ROUTES = {"vllm": "vllm", "vllm-messages": "vllm-messages", "triton": "triton-ensemble"}
# The tiny model's chat template takes a system message only as a string, which vLLM does not
# give it: these conversations have none.
ASK: dict[str, Any] = {
    "model": "claude-x",
    "max_tokens": 6,
    "extra_body": {"temperature": 0},  # (the SDK has no argument for it any more)
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}],
}


@pytest.fixture(scope="module")
def gateway(
    vllm: Server, triton: Server, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tok = str(tiny_model)
    common = {"model": "tiny", "tokenizer": tok, "timeout_s": TIMEOUT}
    config = {
        "backends": {
            "vllm": {"dialect": "openai", "url": vllm.url, "options": {"extensions": "vllm"}, **common},
            "vllm-messages": {"dialect": "anthropic", "url": vllm.url, "options": {"max_tokens": 16}, **common},
            "triton-ensemble": {
                "dialect": "triton", "url": triton.url, "model": "ensemble", "tokenizer": tok,
                "options": {"flavor": "trtllm", "count_tokens": True},
            },
        },
        "routes": [
            {"name": name, "dialect": "anthropic", "backend": b, "prefix": f"/{name}"} for name, b in ROUTES.items()
        ],
    }  # fmt: skip
    with serve(config, tmp_path_factory.mktemp("anthropic")) as gw:
        yield gw


def client(gateway: Gateway, route: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"{gateway.url}/{route}", api_key="any", max_retries=0, timeout=TIMEOUT)


@pytest.mark.parametrize("route", list(ROUTES))
def test_create_stream_and_count_tokens(gateway: Gateway, route: str):
    c = client(gateway, route)
    whole = c.messages.create(**ASK)
    assert whole.stop_reason in ("end_turn", "max_tokens") and whole.model == "claude-x"
    assert whole.usage.input_tokens > 0 and 0 < whole.usage.output_tokens <= 6
    with c.messages.stream(**ASK) as stream:
        streamed = stream.get_final_message()
    assert streamed.model_dump(exclude={"id"}) == whole.model_dump(exclude={"id"})
    counted = c.messages.count_tokens(model="claude-x", messages=ASK["messages"])
    assert counted.input_tokens == whole.usage.input_tokens


def test_stop_sequences_are_named(gateway: Gateway):
    c = client(gateway, "vllm-messages")
    out = c.messages.create(**{**ASK, "max_tokens": 30, "stop_sequences": ["a"]})
    if out.stop_reason == "stop_sequence":
        assert out.stop_sequence == "a"


def test_vllms_own_messages_reach_the_client_as_they_came(gateway: Gateway, vllm: Server):
    body = {"model": "tiny", "max_tokens": 6, "temperature": 0, "stream": True, "messages": ASK["messages"]}

    def lines(stream: bytes) -> list[bytes]:
        # The same bytes but for the message's id, which vLLM makes anew for each request.
        return [line for line in stream.split(b"\n") if b"message_start" not in line]

    # On a busy machine vLLM's API server now and then falls a token behind its engine and merges
    # the two tokens' text into one delta: a pair that differs is asked again; a gateway that
    # changed the bytes would differ every time.
    for _ in range(3):
        direct = httpx.post(f"{vllm.url}/v1/messages", json=body, timeout=TIMEOUT).content
        through = httpx.post(f"{gateway.url}/vllm-messages/v1/messages", json=body, timeout=TIMEOUT).content
        if lines(through) == lines(direct):
            break
    assert lines(through) == lines(direct)
    assert through.count(b"event: ") == direct.count(b"event: ")
