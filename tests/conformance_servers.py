"""The conformance matrix's servers: one per outbound dialect (and flavour).

A server says which upstream path and body fields the gateway must send, which fixture it answers
with (from tests/fixtures/<dialect>/, or tests/fixtures/conformance/ where a folder lacks one) and
what a client must get out of that fixture, in neutral terms.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway import jsonutil
from gateway.neutral.types import Finish
from tests.conformance_cells import CHATML, ID_TEXT, MAX, MESSAGES, PROMPT, UPSTREAM_MODEL, Client, Ctx, Expected


@dataclass(frozen=True)
class Reply:
    payload: str  # fixture path under tests/fixtures/
    expected: Expected


@dataclass(frozen=True)
class Server:
    name: str
    backend: dict[str, Any]
    path: Callable[[str, bool], str]  # (kind, stream) -> upstream path
    check: Callable[[dict[str, Any], str, bool, Client, Ctx], None]  # asserts the essential body fields
    replies: dict[tuple[str, bool], Reply]  # (chat | completion, stream) -> fixture and what it says
    tokenizer: bool = False
    content_type: dict[bool, str] = field(
        default_factory=lambda: {False: "application/json", True: "text/event-stream"}
    )

    def reply(self, kind: str, stream: bool) -> Reply:
        return self.replies[("chat" if kind == "chat" else "completion", stream)]


def prompt_for(kind: str) -> str:
    """The one text prompt a text-only backend must receive."""
    return {"chat": CHATML, "text": PROMPT, "ids": ID_TEXT}[kind]


def _stream_flag(body: dict[str, Any], stream: bool) -> None:
    assert body.get("stream", False) is stream


def _check_openai(vllm: bool) -> Callable[[dict[str, Any], str, bool, Client, Ctx], None]:
    def check(body: dict[str, Any], kind: str, stream: bool, client: Client, ctx: Ctx) -> None:
        assert body["model"] == UPSTREAM_MODEL
        _stream_flag(body, stream)
        if stream:
            assert body["stream_options"] == {"include_usage": True}
        if kind == "chat":
            assert body["messages"] == MESSAGES
            # The public API's chat name is max_completion_tokens; a passthrough keeps the client's.
            same = client.dialect == "openai"
            assert body["max_completion_tokens" if not vllm and not same else "max_tokens"] == MAX
        else:
            assert body["prompt"] == (ctx.ids if kind == "ids" else PROMPT)
            assert body["max_tokens"] == MAX

    return check


def _openai_path(kind: str, stream: bool) -> str:
    return "/v1/chat/completions" if kind == "chat" else "/v1/completions"


OPENAI_REPLIES = {
    ("chat", False): Reply(
        "openai/chat_response.json", Expected("Hello! How can I assist you today?", Finish.EOS, 19, 10)
    ),
    ("chat", True): Reply("openai/chat_stream.sse", Expected("Hello, wörld 👋!", Finish.EOS, 9, 4)),
    ("completion", False): Reply(
        "openai/completion_response.json", Expected("\n\nThis is indeed a test", Finish.LENGTH, 5, 7)
    ),
    ("completion", True): Reply("openai/completion_stream.sse", Expected("This is a test", Finish.LENGTH, 5, 4)),
}


def _mindie_path(kind: str, stream: bool) -> str:
    return {"chat": "/v1/chat/completions", "text": "/infer", "ids": "/infer_token"}[kind]


def _check_mindie(body: dict[str, Any], kind: str, stream: bool, client: Client, ctx: Ctx) -> None:
    _stream_flag(body, stream)
    if kind == "chat":
        assert body["model"] == UPSTREAM_MODEL
        assert body["messages"] == MESSAGES
        assert body["max_tokens"] == MAX
        return
    if kind == "ids":
        assert body["input_id"] == ctx.ids and "inputs" not in body
    else:
        assert body["inputs"] == PROMPT and "input_id" not in body
    assert body["parameters"]["max_new_tokens"] == MAX
    assert body["parameters"]["details"] is True


MINDIE_NATIVE_TEXT = "am a french native speaker. I am looking for a job in the hospitality industry. I"
MINDIE_STREAM_TEXT = "am a French photographer based in Paris.\nI have been shooting since I was 15"
MINDIE_REPLIES = {
    ("chat", False): Reply(
        "mindie/chat_response.json",
        Expected(
            "The best city in China is subjective and depends on personal preferences, but **Shanghai** is often "
            "considered one of the most vibrant and dynamic cities in the country.",
            Finish.EOS,
            45,
            54,
        ),
    ),
    ("chat", True): Reply("mindie/chat_stream.txt", Expected("\t\t", Finish.EOS, 54, 17)),
    # /infer and /infer_token answer alike (seed 000), so the token-id fixtures serve both.
    ("completion", False): Reply(
        "mindie/infer_token_response.json", Expected(MINDIE_NATIVE_TEXT, Finish.LENGTH, None, 20)
    ),
    ("completion", True): Reply("mindie/infer_token_stream.txt", Expected(MINDIE_STREAM_TEXT, Finish.LENGTH, None, 20)),
}


def _check_tgi(body: dict[str, Any], kind: str, stream: bool, client: Client, ctx: Ctx) -> None:
    assert body["inputs"] == prompt_for(kind)
    assert body["parameters"]["max_new_tokens"] == MAX
    assert body["parameters"]["details"] is True
    assert "stream" not in body  # the route says it


TGI_REPLIES = {
    ("completion", False): Reply(
        "tgi/generate_response.json", Expected(" am a French photographer", Finish.LENGTH, None, 4)
    ),
    ("completion", True): Reply("tgi/generate_stream.txt", Expected(" am a French", Finish.EOS, 7, 4)),
}
TGI_REPLIES[("chat", False)] = TGI_REPLIES[("completion", False)]
TGI_REPLIES[("chat", True)] = TGI_REPLIES[("completion", True)]


def _triton_path(kind: str, stream: bool) -> str:
    return f"/v2/models/{UPSTREAM_MODEL}/generate" + ("_stream" if stream else "")


def _triton_check(flavor: str) -> Callable[[dict[str, Any], str, bool, Client, Ctx], None]:
    def check(body: dict[str, Any], kind: str, stream: bool, client: Client, ctx: Ctx) -> None:
        if client.dialect == "triton":
            # Same dialect: the client's body goes upstream unchanged.
            assert body == client.body(stream, ctx)
            return
        assert body["text_input"] == prompt_for(kind)
        if flavor == "trtllm":
            assert body["max_tokens"] == MAX
            assert body["exclude_input_in_output"] is True
            _stream_flag(body, stream)
        elif flavor == "vllm":
            assert jsonutil.loads(body["sampling_parameters"])["max_tokens"] == MAX
            _stream_flag(body, stream)
        else:
            assert body["parameters"]["max_new_tokens"] == MAX
            assert body["parameters"]["details"] is True

    return check


def _triton_replies(flavor: str, json_e: Expected, stream_e: Expected) -> dict[tuple[str, bool], Reply]:
    r = {False: Reply(f"triton/{flavor}_response.json", json_e), True: Reply(f"triton/{flavor}_stream.txt", stream_e)}
    return {(k, s): r[s] for k in ("chat", "completion") for s in (False, True)}


def _triton(flavor: str, json_e: Expected, stream_e: Expected, **options: Any) -> Server:
    backend = {"dialect": "triton", "model": UPSTREAM_MODEL, "options": {"flavor": flavor, **options}}
    return Server(
        f"triton-{flavor}",
        backend,
        _triton_path,
        _triton_check(flavor),
        _triton_replies(flavor, json_e, stream_e),
        tokenizer=True,
    )


def _check_databricks(body: dict[str, Any], kind: str, stream: bool, client: Client, ctx: Ctx) -> None:
    assert "model" not in body
    assert body["stream"] is stream  # always stated: the documented default is true
    assert body["max_tokens"] == MAX
    if kind == "chat":
        assert body["messages"] == MESSAGES
    else:
        # Token ids reach an endpoint as the text the tokenizer reads them as.
        assert body["prompt"] == prompt_for(kind)


DATABRICKS_REPLIES = {
    ("chat", False): Reply("databricks/chat_response.json", Expected("It is 21 degrees in Berlin.", Finish.EOS, 57, 9)),
    ("chat", True): Reply("databricks/chat_stream.txt", Expected("Hallo Welt!", Finish.EOS, 12, 3)),
    ("completion", False): Reply(
        "conformance/databricks_completion_response.json", Expected(" Paris", Finish.EOS, 7, 2)
    ),
    ("completion", True): Reply("databricks/completion_stream.txt", Expected(" Paris", Finish.LENGTH)),
}


SERVERS = [
    Server(
        "openai", {"dialect": "openai", "model": UPSTREAM_MODEL}, _openai_path, _check_openai(False), OPENAI_REPLIES
    ),
    Server(
        "openai-vllm",
        {"dialect": "openai", "model": UPSTREAM_MODEL, "options": {"extensions": "vllm"}},
        _openai_path,
        _check_openai(True),
        OPENAI_REPLIES,
    ),
    Server("mindie", {"dialect": "mindie", "model": UPSTREAM_MODEL}, _mindie_path, _check_mindie, MINDIE_REPLIES),
    Server(
        "tgi",
        {"dialect": "tgi", "model": UPSTREAM_MODEL},
        lambda k, s: "/generate_stream" if s else "/generate",
        _check_tgi,
        TGI_REPLIES,
        tokenizer=True,
    ),
    # count_tokens: output_log_probs counts the generated tokens (4 in both fixtures).
    _triton(
        "trtllm",
        Expected(" Machine learning is a", Finish.EOS, None, 4),
        Expected(" Machine learning is a", Finish.EOS, None, 4),
        count_tokens=True,
    ),
    _triton(
        "vllm",
        Expected("\n\nTriton Inference Server is", Finish.LENGTH, 7, 5),
        Expected("\n\nTriton Inference Server is", Finish.EOS, 7, 5),
    ),
    _triton(
        "mindie",
        Expected(" Olivier and I am a", Finish.EOS, None, 21),
        Expected(" Olivier and I", Finish.LENGTH, None, 3),
    ),
    Server(
        "databricks",
        {"dialect": "databricks", "model": UPSTREAM_MODEL},
        lambda k, s: f"/serving-endpoints/{UPSTREAM_MODEL}/invocations",
        _check_databricks,
        DATABRICKS_REPLIES,
        tokenizer=True,
    ),
]
