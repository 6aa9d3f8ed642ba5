"""What a client sees of a backend's error text: all of it when short, else the start of its first
line and as much of its end as fits. The end is what says what went wrong: Triton's answer for a
Python model that raised is the model's traceback, whose last lines name the exception.

The Triton fixtures are bytes Triton 2.51 (through PyTriton 0.7.0) sent for the real-server
tier's models (tests/real/triton_models.py): `model_error.json` is `failing`'s `/generate` answer
(400), `model_error_stream.txt` is `failing_decoupled`'s `/generate_stream` answer (400, one SSE
event), `several_responses.json` is `several`'s `/generate` answer (200).
"""

from typing import Any

import pytest
from aiohttp import web

from gateway import jsonutil
from gateway.neutral.errors import CLIENT_TEXT_LIMIT, UpstreamError, clip
from tests.conftest import one_route
from tests.fixtures.openai.wire import FIXTURES
from tests.support import Recorded, json_reply, raw_reply, sse_json, sse_reply

TRITON = FIXTURES.parent / "triton"
RAISED = "ValueError: the model failed on purpose"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    + "".join(f'  File "/srv/model/layer_{i}.py", line {i}, in step_{i}\n    step_{i + 1}(x)\n' for i in range(40))
    + "ValueError: boom"
)


def test_a_short_text_is_left_as_it_is() -> None:
    assert clip("bad request\nsee the docs") == "bad request\nsee the docs"
    assert clip("x" * CLIENT_TEXT_LIMIT) == "x" * CLIENT_TEXT_LIMIT


def test_a_long_text_keeps_its_first_line_and_its_end() -> None:
    cut = clip(TRACEBACK)
    assert len(cut) <= CLIENT_TEXT_LIMIT
    assert cut.startswith("Traceback (most recent call last): […] ")
    assert cut.endswith("    step_40(x)\nValueError: boom")
    # The end begins at a line's start.
    assert "\n" + cut.split(" […] ", 1)[1] in TRACEBACK


def test_a_long_first_line_is_cut_too() -> None:
    cut = clip("E" * 2000 + "\nValueError: boom")
    assert len(cut) <= CLIENT_TEXT_LIMIT and cut.endswith("ValueError: boom") and " […] " in cut


def test_cutting_again_after_a_prefix_keeps_one_mark_and_the_end() -> None:
    message = UpstreamError("backend 'up' answered 400: " + clip(TRACEBACK)).message
    assert len(message) <= CLIENT_TEXT_LIMIT
    assert message.startswith("backend 'up' answered 400: Traceback (most recent call last): […] ")
    assert message.count("[…]") == 1 and message.endswith("ValueError: boom")


def _triton(name: str) -> bytes:
    return (TRITON / name).read_bytes()


# A backend's error answer for a model that raised, in each backend dialect's error shape.
ERROR_BODIES: dict[str, tuple[dict[str, Any], int, Any]] = {
    "openai": ({}, 500, {"error": {"message": TRACEBACK, "type": "server_error", "code": 500}}),
    "tgi": ({}, 500, {"error": TRACEBACK, "error_type": "generation"}),
    "mindie": ({}, 500, {"error": TRACEBACK, "error_type": "Incomplete Generation"}),
    "triton": ({"model": "m"}, 500, {"error": TRACEBACK}),
    "databricks": ({"model": "m"}, 500, {"error_code": "INTERNAL_ERROR", "message": TRACEBACK}),
}


@pytest.mark.parametrize("backend", list(ERROR_BODIES))
async def test_every_dialects_error_text_reaches_the_client_with_its_end(upstream, make_gateway, backend):
    options, status, body = ERROR_BODIES[backend]
    upstream.reply = json_reply(body, status=status)
    gw = await make_gateway(one_route("tgi", backend, upstream.url, **options))
    resp = await gw.post("/generate", json={"inputs": "hi", "parameters": {"max_new_tokens": 4}})
    message = (await resp.json())["error"]
    assert f"answered {status}: " in message and "Traceback (most recent call last): […] " in message
    assert message.endswith("ValueError: boom") and len(message) <= CLIENT_TEXT_LIMIT


async def test_a_stream_broken_off_by_raw_text_shows_its_end(upstream, make_gateway):
    upstream.reply = sse_reply([b'data: {"token": {"id": 1, "text": "a"}}\n\n', TRACEBACK.encode() + b"\n"])
    gw = await make_gateway(one_route("openai", "tgi", upstream.url))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "hi", "stream": True})
    error = sse_json(await resp.read())[-2]["error"]
    assert error["message"].startswith("backend broke off the stream: Traceback")
    assert error["message"].endswith("ValueError: boom")


async def test_a_triton_model_that_raised_is_named_to_an_openai_client(upstream, make_gateway):
    upstream.reply = raw_reply(_triton("model_error.json"), status=400)
    gw = await make_gateway(one_route("openai", "triton", upstream.url, model="failing"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "hi"})
    assert resp.status == 400
    message = (await resp.json())["error"]["message"]
    assert message.startswith(
        "backend 'up' answered 400: Failed to process the request(s) for model 'failing_0_0', message: "
        "TritonModelException: Model execute error: Traceback (most recent call last): […] "
    )
    # Triton puts where the Python backend called the model after the exception's line.
    assert f"{RAISED}    At:   /tmp/" in message and message.endswith("/1/model.py(501): execute")


async def test_a_triton_stream_whose_model_raised_is_named_to_an_openai_client(upstream, make_gateway):
    upstream.reply = raw_reply(_triton("model_error_stream.txt"), 400, "text/event-stream")
    gw = await make_gateway(one_route("openai", "triton", upstream.url, model="failing_decoupled"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "hi", "stream": True})
    assert resp.status == 400
    message = (await resp.json())["error"]["message"]
    assert message.startswith("backend 'up' answered 400: Traceback (most recent call last): […] ")
    assert message.endswith(RAISED)


async def test_a_triton_client_gets_the_stream_error_as_triton_sent_it(upstream, make_gateway):
    upstream.reply = raw_reply(_triton("model_error_stream.txt"), 400, "text/event-stream")
    gw = await make_gateway(one_route("triton", "triton", upstream.url, model="failing_decoupled"))
    resp = await gw.post("/v2/models/failing_decoupled/generate_stream", json={"text_input": "hi"})
    assert (resp.status, resp.content_type) == (400, "text/event-stream")
    assert await resp.read() == _triton("model_error_stream.txt")


async def test_several_responses_to_generate_are_a_400_with_tritons_body_for_a_triton_client(upstream, make_gateway):
    """Triton answers 200 with an error when a model gives more than one response to /generate;
    its generate extension has a failed request answer 400 with that body."""
    upstream.reply = raw_reply(_triton("several_responses.json"))
    gw = await make_gateway(one_route("triton", "triton", upstream.url, model="several"))
    resp = await gw.post("/v2/models/several/generate", json={"text_input": "hi"})
    assert (resp.status, resp.content_type) == (400, "application/json")
    assert await resp.read() == _triton("several_responses.json")


async def test_several_responses_to_generate_the_gateway_asked_for_are_a_backend_failure(upstream, make_gateway):
    upstream.reply = raw_reply(_triton("several_responses.json"))
    gw = await make_gateway(one_route("openai", "triton", upstream.url, model="several"))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "hi"})
    assert resp.status == 502
    triton_says = jsonutil.loads(_triton("several_responses.json"))["error"]
    assert (await resp.json())["error"]["message"] == f"backend error in a 200 answer: {triton_says}"


async def test_a_backends_error_for_its_own_client_is_the_whole_body(upstream, make_gateway):
    """A client of the backend's wire gets its error body as it came: nothing is cut."""

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.json_response({"error": TRACEBACK}, status=500)

    upstream.reply = reply
    gw = await make_gateway(one_route("triton", "triton", upstream.url, model="m"))
    resp = await gw.post("/v2/models/m/generate", json={"text_input": "hi"})
    assert resp.status == 500 and (await resp.json())["error"] == TRACEBACK
