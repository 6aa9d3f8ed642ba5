"""vLLM's and Triton's own stream bytes read from the template (gateway.codec.textchunks) give
what reading every chunk whole gives, and the template is learned from them: the fast path is
the one real streams take, not only the benchmark's."""

import httpx
import pytest

from gateway.codec.parsing import EventParser
from gateway.dialects.anthropic.reading import MessagesStreamParser
from gateway.dialects.openai.reading import OpenAIStreamParser
from gateway.dialects.responses.reading import ResponsesStreamParser
from gateway.dialects.triton.families import TRTLLM_READING, VLLM_READING
from gateway.dialects.triton.reading import CallState, TritonStreamParser
from tests.real import servers
from tests.test_textchunks import event_cuts, read_all, triton_parser, whole_reading

TIMEOUT = 120


@pytest.mark.parametrize("chat", [True, False])
def test_vllm_streams_read_from_the_template(vllm: servers.Server, chat: bool) -> None:
    body: dict[str, object] = {"model": "tiny", "stream": True, "max_tokens": 48, "temperature": 0, "ignore_eos": True}
    if chat:
        body["messages"] = [{"role": "user", "content": "Tell me about café culture 😀"}]
    else:
        body["prompt"] = "Once upon a time"
    path = "/v1/chat/completions" if chat else "/v1/completions"
    data = httpx.post(vllm.url + path, json=body, timeout=TIMEOUT).content
    expected = read_all(whole_reading(chat), data, [])
    assert expected[1] is None and len(expected[0]) > 10
    for cuts in ([], list(range(97, len(data), 97)), list(range(1, len(data), 1001))):
        parser = OpenAIStreamParser(chat=chat)
        assert read_all(parser, data, cuts) == expected
        assert parser._chunks is not None and parser._chunks.read > 0  # learned from vLLM's bytes


@pytest.mark.parametrize("log_probs", [True, False])
def test_triton_trtllm_streams_read_from_the_template(triton: servers.Server, log_probs: bool) -> None:
    """Triton's own bytes for the TensorRT-LLM ensemble's stream: log probabilities that change
    from event to event (asked for, as the gateway asks by default) or zeros."""
    body = {"text_input": "Tell me about café culture", "max_tokens": 16, "stream": True, "return_log_probs": log_probs}
    data = httpx.post(triton.url + "/v2/models/ensemble/generate_stream", json=body, timeout=TIMEOUT).content
    expected = read_all(triton_parser(False), data, [])  # type: ignore[arg-type]
    assert expected[1] is None and len(expected[0]) > 10
    for cuts in ([], list(range(97, len(data), 97)), list(range(1, len(data), 1001))):
        parser = triton_parser()
        assert read_all(parser, data, cuts) == expected  # type: ignore[arg-type]
        assert parser._chunks is not None and parser._chunks.read > 0  # read from Triton's bytes


@pytest.mark.parametrize("model", ["vllm_model", "several"])
def test_triton_minimal_and_vllm_backend_streams_read_from_the_template(triton: servers.Server, model: str) -> None:
    """Triton's minimal generate events (`model_name`, `model_version`, `text_output`) and its vLLM
    backend's, as the real server writes them."""
    reading = VLLM_READING if model == "vllm_model" else TRTLLM_READING
    body = {"text_input": "Tell me about café culture", "max_tokens": 16, "stream": True}
    data = httpx.post(triton.url + f"/v2/models/{model}/generate_stream", json=body, timeout=TIMEOUT).content
    whole = TritonStreamParser(CallState(reading, "prompt", 16))
    whole._chunks = None
    expected = read_all(whole, data, [])  # type: ignore[arg-type]
    assert expected[1] is None and len(expected[0]) > 2
    for cuts in ([], list(range(37, len(data), 37)), event_cuts(data)):
        parser = TritonStreamParser(CallState(reading, "prompt", 16))
        assert read_all(parser, data, cuts) == expected  # type: ignore[arg-type]
        assert parser._chunks is not None and parser._chunks.read > 0


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
def test_vllm_messages_and_responses_streams_read_from_the_template(vllm: servers.Server, path: str) -> None:
    if path == "/v1/messages":
        body: dict[str, object] = {"model": "tiny", "max_tokens": 32, "stream": True, "temperature": 0}
        body["messages"] = [{"role": "user", "content": "Tell me about café culture 😀"}]
        make: type[EventParser] = MessagesStreamParser
    else:
        body = {"model": "tiny", "max_output_tokens": 32, "stream": True, "temperature": 0, "input": "Once upon a time"}
        make = ResponsesStreamParser
    data = httpx.post(vllm.url + path, json=body, timeout=TIMEOUT).content
    whole = make()
    whole._chunks = None
    expected = read_all(whole, data, [])  # type: ignore[arg-type]
    assert expected[1] is None and len(expected[0]) > 3
    for cuts, between in (([], True), (list(range(97, len(data), 97)), False), (event_cuts(data), True)):
        parser = make()
        assert read_all(parser, data, cuts) == expected  # type: ignore[arg-type]
        if between:  # reads that start between events (a short answer cut anywhere may never)
            assert parser._chunks is not None and parser._chunks.read > 0
