"""The conformance matrix's clients: one per inbound request kind, plus what cells share.

A client says how to call the gateway (path, body) and how to read the answer back in its own
dialect (text, finish reason, counts), asserting that dialect's exact shape on the way. The
servers are in tests/conformance_servers.py; refusals are listed in tests/test_conformance.py.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.dialects.openai.params import FINISH as OPENAI
from gateway.dialects.tgi.render import FINISH as TGI
from gateway.neutral.types import Finish
from tests.support import sse_json

FIXTURES = Path(__file__).parent / "fixtures"
MAX = 16
PROMPT = "Say hello"
MESSAGES = [{"role": "user", "content": "Hi there"}]
# MESSAGES through tests/tokenizer_kit.py's ChatML template (bos token first, generation prompt last).
CHATML = "<|bos|><|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
ID_TEXT = "Hello world"  # what the token-id client's ids decode to
UPSTREAM_MODEL = "up-model"


@dataclass(frozen=True)
class Ctx:
    ids: list[int]  # ID_TEXT encoded with the session tokenizer
    tokenizer: str  # the tokenizer folder


@dataclass(frozen=True)
class Answer:
    """What a client read out of the gateway's answer, in its own vocabulary."""

    text: str
    finish: str | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class Expected:
    """What the upstream fixture says, in neutral terms."""

    text: str
    finish: Finish
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def raw(path: str) -> bytes:
    return (FIXTURES / path).read_bytes()


def frames(path: str) -> list[bytes]:
    """A fixture stream split into its events, each to be written as its own chunk."""
    return [p + b"\n\n" for p in raw(path).split(b"\n\n") if p]


# ---- clients -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Client:
    name: str
    dialect: str
    kind: str  # chat | text | ids: what the upstream must receive as the prompt
    path: Callable[[bool], str]
    body: Callable[[bool, Ctx], dict[str, Any]]
    read: Callable[[Any], Answer]  # the whole answer (parsed JSON)
    read_stream: Callable[[bytes], Answer]
    finish_words: dict[Finish, str] | None  # None: the dialect reports no finish reason
    # The counts the dialect carries, as (prompt, completion), for a whole answer and for a stream.
    counts: dict[bool, tuple[bool, bool]] = field(default_factory=lambda: {False: (True, True), True: (True, True)})
    # The counts come as one object (OpenAI's usage): all or nothing, so a backend that reports
    # only some of them (and no tokenizer fills the rest) leaves usage out.
    paired: bool = True
    content_type: str = "text/event-stream"
    prefix: str = ""


def _usage(u: Any) -> tuple[int | None, int | None]:
    if not u:
        return None, None
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    return u["prompt_tokens"], u["completion_tokens"]


def _read_chat(*obj_names: str) -> Callable[[Any], Answer]:
    def read(obj: Any) -> Answer:
        assert obj["object"] in obj_names
        (c,) = obj["choices"]
        assert c["index"] == 0
        assert c["message"]["role"] == "assistant"
        return Answer(c["message"]["content"], c["finish_reason"], *_usage(obj.get("usage")))

    return read


def _read_completion(obj: Any) -> Answer:
    assert obj["object"] == "text_completion"
    (c,) = obj["choices"]
    assert c["index"] == 0
    return Answer(c["text"], c["finish_reason"], *_usage(obj.get("usage")))


def _read_openai_stream(
    chat: bool, usage_alone: bool | None, role_every_chunk: bool = False
) -> Callable[[bytes], Answer]:
    """OpenAI-style chunks ending in [DONE]. `usage_alone`: usage comes in its own last chunk with
    no choices (OpenAI's include_usage); False: in the last chunk, next to the finish reason
    (MindIE); None: either (a Databricks pass-through keeps the backend's own chunks)."""

    def read(body: bytes) -> Answer:
        events = sse_json(body)
        assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
        chunks = events[:-1]
        assert chunks
        text, finish, usage = "", None, None
        for i, ch in enumerate(chunks):
            assert ch["object"] == ("chat.completion.chunk" if chat else "text_completion")
            assert ch["id"] == chunks[0]["id"]
            assert finish is None or (usage_alone is not False and ch["choices"] == []), "only usage after finish"
            for c in ch["choices"]:
                assert c["index"] == 0
                if chat:
                    if i == 0 or role_every_chunk:
                        assert c["delta"]["role"] == "assistant"
                    text += c["delta"].get("content") or ""
                else:
                    text += c["text"]
                finish = c.get("finish_reason") or finish
            if ch.get("usage"):
                assert usage is None
                usage = ch["usage"]
                assert ch is chunks[-1]
                if usage_alone is not None:
                    assert (ch["choices"] == []) if usage_alone else ch["choices"][0]["finish_reason"]
        return Answer(text, finish, *_usage(usage))

    return read


def _read_infer(obj: Any) -> Answer:
    """MindIE /infer: generated_text plus details (asked for with details: true)."""
    assert set(obj) == {"generated_text", "details"}
    d = obj["details"]
    return Answer(obj["generated_text"], d["finish_reason"], None, d["generated_tokens"])


def _read_infer_stream(body: bytes) -> Answer:
    """MindIE native stream: token events, then a final event whose token text is null and which
    holds generated_text and details (seed 000). No [DONE]."""
    events = sse_json(body)
    assert events and "[DONE]" not in events
    *tokens, last = events
    for ev in tokens:
        assert set(ev) == {"prefill_time", "decode_time", "token"}
        assert isinstance(ev["token"]["text"], str)
    assert last["token"]["text"] is None
    streamed = "".join(ev["token"]["text"] for ev in tokens)
    assert last["generated_text"].startswith(streamed)
    d = last["details"]
    return Answer(last["generated_text"], d["finish_reason"], None, d["generated_tokens"])


def _read_tgi(obj: Any) -> Answer:
    d = obj["details"]
    return Answer(obj["generated_text"], d["finish_reason"], None, d["generated_tokens"])


def _read_tgi_stream(body: bytes) -> Answer:
    """TGI stream: `data:{...}` token events, the last with generated_text and details. No [DONE]."""
    assert b"data: " not in body and b"[DONE]" not in body
    events = sse_json(body)
    *tokens, last = events
    for i, ev in enumerate(events, 1):
        assert ev["index"] == i
    for ev in tokens:
        assert ev["generated_text"] is None and ev["details"] is None
    text = "".join(ev["token"]["text"] for ev in events if not ev["token"]["special"])
    assert last["generated_text"] == text
    d = last["details"]
    return Answer(text, d["finish_reason"], d.get("input_length"), d["generated_tokens"])


# What a Triton backend adds to its answers; a Triton client of a Triton backend gets them as sent.
_TRITON_EXTRAS = {
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "id",
    "cum_log_probs",
    "output_log_probs",
    "batch_index",
    "sequence_index",
    "context_logits",
    "generation_logits",
    "finish_reason",
    "num_input_tokens",
    "num_output_tokens",
    "details",
    "prefill_time",
    "decode_time",
}


def _triton_object(obj: Any) -> None:
    # (MindIE's Triton variant says model_version null; a Triton client of it gets that as sent.)
    assert obj["model_name"] == "m" and obj["model_version"] in ("1", None) and isinstance(obj["text_output"], str)
    assert set(obj) - {"model_name", "model_version", "text_output"} <= _TRITON_EXTRAS, obj


def _read_triton(obj: Any) -> Answer:
    _triton_object(obj)
    return Answer(obj["text_output"], None)


def _read_triton_stream(body: bytes) -> Answer:
    """Triton: one `data: {...}` per delta, no terminator, no finish reason."""
    assert b"[DONE]" not in body
    events = sse_json(body)
    for ev in events:
        _triton_object(ev)
    return Answer("".join(ev["text_output"] for ev in events), None)


def _openai_body(key: str, value: Any) -> Callable[[bool, Ctx], dict[str, Any]]:
    def body(stream: bool, ctx: Ctx) -> dict[str, Any]:
        b = {"model": "m", key: value, "max_tokens": MAX, "stream": stream}
        if stream:
            b["stream_options"] = {"include_usage": True}
        return b

    return body


def _native_body(stream: bool, ctx: Ctx) -> dict[str, Any]:
    return {"inputs": PROMPT, "stream": stream, "parameters": {"max_new_tokens": MAX, "details": True}}


def _token_body(stream: bool, ctx: Ctx) -> dict[str, Any]:
    return {"input_id": ctx.ids, "stream": stream, "parameters": {"max_new_tokens": MAX, "details": True}}


def _databricks_body(stream: bool, ctx: Ctx) -> dict[str, Any]:
    b: dict[str, Any] = {"messages": MESSAGES, "max_tokens": MAX, "stream": stream}
    if stream:
        b["stream_options"] = {"include_usage": True}
    return b


CLIENTS = [
    Client(
        "openai-chat",
        "openai",
        "chat",
        lambda s: "/v1/chat/completions",
        _openai_body("messages", MESSAGES),
        _read_chat("chat.completion"),
        _read_openai_stream(chat=True, usage_alone=True),
        OPENAI,
    ),
    Client(
        "openai-completions",
        "openai",
        "text",
        lambda s: "/v1/completions",
        _openai_body("prompt", PROMPT),
        _read_completion,
        _read_openai_stream(chat=False, usage_alone=True),
        OPENAI,
    ),
    Client(
        "mindie-native",
        "mindie",
        "text",
        lambda s: "/infer",
        _native_body,
        _read_infer,
        _read_infer_stream,
        TGI,
        counts={False: (False, True), True: (False, True)},
        paired=False,
    ),
    Client(
        "mindie-token",
        "mindie",
        "ids",
        lambda s: "/infer_token",
        _token_body,
        _read_infer,
        _read_infer_stream,
        TGI,
        counts={False: (False, True), True: (False, True)},
        paired=False,
    ),
    Client(
        "mindie-openai",
        "mindie",
        "chat",
        lambda s: "/mindie/v1/chat/completions",
        lambda s, ctx: {"model": "m", "messages": MESSAGES, "max_tokens": MAX, "stream": s},
        _read_chat("chat.completion"),
        _read_openai_stream(chat=True, usage_alone=False, role_every_chunk=True),
        OPENAI,
        prefix="/mindie",
    ),
    Client(
        "tgi",
        "tgi",
        "text",
        lambda s: "/generate_stream" if s else "/generate",
        lambda s, ctx: {"inputs": PROMPT, "parameters": {"max_new_tokens": MAX, "details": True}},
        _read_tgi,
        _read_tgi_stream,
        TGI,
        counts={False: (False, True), True: (True, True)},
        paired=False,
    ),
    Client(
        "triton",
        "triton",
        "text",
        lambda s: "/v2/models/m/generate_stream" if s else "/v2/models/m/generate",
        lambda s, ctx: {"text_input": PROMPT, "parameters": {"max_tokens": MAX}},
        _read_triton,
        _read_triton_stream,
        None,
        counts={False: (False, False), True: (False, False)},
        paired=False,
    ),
    Client(
        "databricks-chat",
        "databricks",
        "chat",
        lambda s: "/serving-endpoints/m/invocations",
        _databricks_body,
        # Live servers and the SDK's enum say chat.completion (seed 002's reference says the plural).
        _read_chat("chat.completion", "chat.completion"),
        _read_openai_stream(chat=True, usage_alone=None),
        OPENAI,
    ),
]
