"""The fixed answers each backend dialect gives, and the nginx stub that serves them.

Every answer has the shape of a captured one (tests/fixtures/, docs/dialects/): OpenAI chat and
completions, MindIE's OpenAI-flavoured chat and native /infer, Triton's TensorRT-LLM generate.
Each comes whole (JSON) and as a stream of STREAM_EVENTS `data:` events. The files are laid out
by URL path under one folder, whole answers at their own path and streams under /stream, so a
backend's `url` picks whole answers (`http://stub`) or streams (`http://stub/stream`); nginx
cannot look into a POST body for `"stream": true`, and this way it need not.

The paths are the ones the gateway's backends call (benchmarks/run.py checks every scenario's
answer before loading it): an OpenAI backend gets chat at /v1/chat/completions (OpenAI and
Databricks chat clients) and completions at /v1/completions (TGI /generate and MindIE
/infer_token clients); a MindIE backend gets chat at /v1/chat/completions under its url's base
/mindie (and text completions at /infer); a Triton backend at /v2/models/{model}/generate and
/generate_stream, so its `model:` is `bench`.

nginx serves them as static files. Its static handler answers POST with 405, so the server turns
that 405 into an internal redirect to the same path, which nginx makes as a GET:
`error_page 405 =200 $uri`. The bytes are checked against the files before any run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STREAM_EVENTS = 200
# Token texts of the streams, in turn; what a client should get back is their concatenation.
WORDS = [" The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."]
WHOLE_TOKENS = 10
# Each whole answer has its own text, so a client's answer shows which backend path served it.
CHAT_TEXT = "Hello! How can I assist you today?"
COMPLETION_TEXT = "This is indeed a test of the completions route."
MINDIE_CHAT_TEXT = "Shanghai is often considered the most vibrant city."
MINDIE_INFER_TEXT = "MindIE says hello from its native infer route."
TRITON_TEXT = " Machine learning is a field of artificial intelligence."


def stream_tokens(n: int) -> list[str]:
    return [WORDS[i % len(WORDS)] for i in range(n)]


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _sse(events: list[Any], space: bool = True) -> bytes:
    sep = "data: " if space else "data:"
    return "".join(f"{sep}{e if isinstance(e, str) else _compact(e)}\n\n" for e in events).encode()


@dataclass(frozen=True)
class Answer:
    """One backend endpoint: where it is called and what it answers, whole and streamed."""

    name: str
    path: str  # the whole answer's path, relative to the backend's url
    stream_path: str  # the stream's path, relative to the backend's url (`/stream` is put before it)
    whole: bytes
    stream: bytes
    text: str  # the text the whole answer carries
    stream_text: str  # all the stream's token texts, in order
    base: str = ""  # the backend's url path, so that two backends may answer the same path

    @property
    def whole_url_path(self) -> str:
        return self.base + self.path

    @property
    def stream_url_path(self) -> str:
        return "/stream" + self.base + self.stream_path


def openai_chat() -> Answer:
    # tests/fixtures/openai/chat_response.json and chat_stream.sse
    head = {"id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion", "created": 1741569952}
    usage = {
        "prompt_tokens": 19,
        "completion_tokens": WHOLE_TOKENS,
        "total_tokens": 19 + WHOLE_TOKENS,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    whole = {
        **head,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": CHAT_TEXT, "refusal": None, "annotations": []},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
        "service_tier": "default",
        "system_fingerprint": "fp_06737a9306",
    }
    tokens = stream_tokens(STREAM_EVENTS - 4)  # role, tokens, finish, usage, [DONE]
    chunk = {**head, "object": "chat.completion.chunk", "model": "gpt-4o-mini", "system_fingerprint": "fp_44709d6fcb"}

    def ev(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {**chunk, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    events: list[Any] = [ev({"role": "assistant", "content": "", "refusal": None}, None)]
    events += [ev({"content": t}, None) for t in tokens]
    events.append(ev({}, "length"))
    n = len(tokens)
    events.append(
        {**chunk, "choices": [], "usage": {"prompt_tokens": 19, "completion_tokens": n, "total_tokens": n + 19}}
    )
    events.append("[DONE]")
    return Answer(
        "openai chat",
        "/v1/chat/completions",
        "/v1/chat/completions",
        _compact(whole).encode(),
        _sse(events),
        CHAT_TEXT,
        "".join(tokens),
    )


def openai_completion() -> Answer:
    # tests/fixtures/openai/completion_response.json and completion_stream.sse
    head = {"id": "cmpl-7iA7iJjj8V2zOkCGvWF2hAkDWBQZe", "object": "text_completion", "created": 1690759702}
    whole = {
        **head,
        "model": "gpt-3.5-turbo-instruct",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"text": COMPLETION_TEXT, "index": 0, "logprobs": None, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": WHOLE_TOKENS, "total_tokens": 5 + WHOLE_TOKENS},
    }
    tokens = stream_tokens(STREAM_EVENTS - 3)  # tokens, finish, usage, [DONE]
    tail = {"model": "gpt-3.5-turbo-instruct", "system_fingerprint": "fp_44709d6fcb"}

    def ev(text: str, finish: str | None) -> dict[str, Any]:
        return {**head, "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}], **tail}

    events: list[Any] = [ev(t, None) for t in tokens]
    events.append(ev("", "length"))
    n = len(tokens)
    events.append(
        {
            **head,
            "choices": [],
            "model": tail["model"],
            "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5},
        }
    )
    events.append("[DONE]")
    return Answer(
        "openai completion",
        "/v1/completions",
        "/v1/completions",
        _compact(whole).encode(),
        _sse(events),
        COMPLETION_TEXT,
        "".join(tokens),
    )


def mindie_chat() -> Answer:
    # MindIE's OpenAI-flavoured route: tests/fixtures/mindie/chat_response.json and chat_stream.txt
    # (usage carries MindIE's benchmark extras; every delta repeats the role; finish and usage together).
    head = {"id": "endpoint_common_16", "object": "chat.completion", "created": 1762330491, "model": "qwen"}
    whole = {
        **head,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": MINDIE_CHAT_TEXT, "tool_calls": []},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 45,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens": WHOLE_TOKENS,
            "total_tokens": 45 + WHOLE_TOKENS,
            "batch_size": [1] * WHOLE_TOKENS,
            "queue_wait_time": [5148] + [800] * (WHOLE_TOKENS - 1),
        },
        "prefill_time": 39,
        "decode_time_arr": [27] * WHOLE_TOKENS,
    }
    tokens = stream_tokens(STREAM_EVENTS - 2)  # tokens, finish with usage, [DONE]
    chunk = {**head, "object": "chat.completion.chunk"}

    def ev(text: str, finish: str | None) -> dict[str, Any]:
        return {
            **chunk,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": finish}],
        }

    events: list[Any] = [ev(t, None) for t in tokens]
    n = len(tokens)
    last = ev("", "length")
    last["usage"] = {
        "prompt_tokens": 45,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens": n,
        "total_tokens": n + 45,
    }
    events += [last, "[DONE]"]
    return Answer(
        "mindie chat",
        "/v1/chat/completions",
        "/v1/chat/completions",
        _compact(whole).encode(),
        _sse(events),
        MINDIE_CHAT_TEXT,
        "".join(tokens),
        "/mindie",
    )


def mindie_infer() -> Answer:
    # MindIE's native route: tests/fixtures/mindie/infer_token_response.json and infer_token_stream.txt
    # (no [DONE]; the last event holds the last token with text null, the whole text and details).
    whole = {
        "generated_text": MINDIE_INFER_TEXT,
        "details": {"finish_reason": "length", "generated_tokens": WHOLE_TOKENS, "seed": 846930886},
    }
    tokens = stream_tokens(STREAM_EVENTS)
    events: list[Any] = []
    for i, t in enumerate(tokens[:-1]):
        first = i == 0
        events.append(
            {
                "prefill_time": 45.54 if first else None,
                "decode_time": None if first else 16.8,
                "token": {"id": 300 + i % 50, "text": t},
            }
        )
    details = {"finish_reason": "length", "generated_tokens": len(tokens), "seed": 846930886}
    events.append(
        {
            "prefill_time": None,
            "decode_time": 16.8,
            "generated_text": "".join(tokens),
            "details": details,
            "token": {"id": 299, "text": None},
        }
    )
    return Answer(
        "mindie /infer",
        "/infer",
        "/infer",
        _compact(whole).encode(),
        _sse(events),
        MINDIE_INFER_TEXT,
        "".join(tokens),
        "/mindie",
    )


def triton_trtllm() -> Answer:
    # Triton's generate extension in front of the TensorRT-LLM ensemble: tests/fixtures/triton/
    # trtllm_response.json and trtllm_stream.txt (no terminator: the stream just ends).
    base = {
        "model_name": "ensemble",
        "model_version": "1",
        "sequence_end": False,
        "sequence_id": 0,
        "sequence_start": False,
    }
    whole = {
        **base,
        "cum_log_probs": 0.0,
        "output_log_probs": [-0.1] * WHOLE_TOKENS,
        "context_logits": 0.0,
        "generation_logits": 0.0,
        "text_output": TRITON_TEXT,
    }
    # One token per event, as TensorRT-LLM streams it: one log prob each, in a list.
    tokens = stream_tokens(STREAM_EVENTS)
    events = [{**base, "output_log_probs": [-0.1], "text_output": t} for t in tokens]
    return Answer(
        "triton generate",
        "/v2/models/bench/generate",
        "/v2/models/bench/generate_stream",
        _compact(whole).encode(),
        _sse(events),
        TRITON_TEXT,
        "".join(tokens),
    )


def _recorded() -> dict[str, Answer]:
    # The real servers' shapes, made with this module's Answer (so imported here, once it exists).
    from benchmarks.recorded import answers

    return answers()


ANSWERS = {
    a.name: a for a in (openai_chat(), openai_completion(), mindie_chat(), mindie_infer(), triton_trtllm())
} | _recorded()


def write_files(root: Path) -> Path:
    """Each answer at its URL path under `root/www`; returns that folder."""
    www = root / "www"
    for a in ANSWERS.values():
        for path, body in ((a.whole_url_path, a.whole), (a.stream_url_path, a.stream)):
            f = www / path.lstrip("/")
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(body)
    return www


def _inlinable(body: bytes) -> bool:
    """Whether nginx can say `body` as a quoted string of its config: no variables, quotes or
    escapes inside, and short enough for one token of its config reader."""
    return body.isascii() and len(body) < 2048 and not any(c in body for c in (b"'", b"$", b"\\"))


def nginx_conf(root: Path, port: int) -> Path:
    """An nginx.conf of its own under `root`: no system config, pid, logs and temp files under `root`."""
    www = write_files(root)
    tmp = root / "nginx-tmp"
    tmp.mkdir(exist_ok=True)
    temp_paths = "\n".join(
        f"  {kind}_temp_path {tmp / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = root / "nginx.conf"
    # The backend shares the load generator's core, and in the two-worker run the second
    # worker's too: the less it costs, the less it disturbs what is measured. A whole answer is
    # served from the config itself (no file to open), a stream from a file whose descriptor
    # stays open; each costs nginx about 13 and 18 us of CPU against 21 for a file opened anew.
    inline = "\n".join(
        f"    location = {a.whole_url_path} {{ default_type application/json; return 200 '{a.whole.decode()}'; }}"
        for a in ANSWERS.values()
        if _inlinable(a.whole)
    )
    conf.write_text(
        f"""daemon off;
worker_processes 1;
pid {root / "nginx.pid"};
error_log {root / "nginx-error.log"} warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
{temp_paths}
  sendfile on;
  tcp_nopush on;
  open_file_cache max=1000 inactive=1h;
  open_file_cache_valid 1h;
  tcp_nodelay on;
  etag off;
  server_tokens off;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  types {{}}
  server {{
    listen 127.0.0.1:{port};
    root {www};
    # Static files answer POST with 405; an error_page redirect to the same path is made as a GET.
    error_page 405 =200 $uri;
    location / {{ default_type application/json; }}
    # A router's health probe (vllm-router asks each worker before it routes to it).
    location ~ /health$ {{ default_type text/plain; return 200 'ok'; }}
    location /stream/ {{ default_type text/event-stream; }}
{inline}
  }}
}}
"""
    )
    return conf
