"""MindIE's OpenAI-flavoured /v1/chat/completions and /v1/completions, and the vLLM-style /generate.

Parsing reuses the OpenAI dialect with MindIE's own schema (wider limits, seed 004's extra
fields); rendering follows MindIE: ids `endpoint_common_N`, `message.tool_calls` always present,
every stream delta repeating the role, finish reason and usage together in the last chunk, and a
raw text line (no `[DONE]`) when the stream fails after it began.
"""

import itertools
from abc import ABC, abstractmethod
from typing import Any

from aiohttp import web

from gateway import jsonutil
from gateway.core import finish as vocab
from gateway.core.errors import GatewayError, Unsupported
from gateway.core.types import (
    EmbeddingResult,
    Event,
    Finish,
    FinishEvent,
    Request,
    Result,
    Task,
    TextDelta,
    Usage,
    UsageEvent,
)
from gateway.core.validation import load_object, validate
from gateway.dialects.base import RenderContext
from gateway.dialects.mindie.native import raw_error
from gateway.dialects.mindie.schema import MindIEChatRequest, MindIECompletionRequest, VllmGenerateRequest
from gateway.dialects.openai.inbound import parse_chat as openai_parse_chat
from gateway.dialects.openai.inbound import parse_completion as openai_parse_completion
from gateway.dialects.openai.render import chat_delta_choice
from gateway.sse import DONE_FRAME

_dumps = jsonutil.dumps
_ids = itertools.count(1)
_MEDIA = ("image_url", "video_url", "audio_url")


def next_id() -> str:
    return f"endpoint_common_{next(_ids)}"


def _mindie_fixups(req: Request) -> Request:
    raw = req.raw or {}
    if raw.get("use_beam_search"):
        raise Unsupported("use_beam_search is not supported by the gateway", param="use_beam_search")
    if req.params.get("top_k") == 0:
        del req.params["top_k"]  # seed 004's examples send 0 for "not set"
    if raw.get("top_logprobs") is not None and req.task is Task.CHAT:
        req.params["logprobs"] = True  # MindIE: top_logprobs alone implies logprobs
    if raw.get("best_of") not in (None, 1):
        req.params["best_of"] = raw["best_of"]
    for m in req.messages or ():
        if isinstance(m.content, list):
            # MindIE media parts carry a plain string; the neutral (OpenAI) form wants {"url": ...}.
            m.content = [
                {**p, p["type"]: {"url": p[p["type"]]}}
                if p.get("type") in _MEDIA and isinstance(p.get(p["type"]), str)
                else p
                for p in m.content
            ]
    return req


def parse_chat(body: bytes, request: web.Request | None = None) -> Request:
    return _mindie_fixups(openai_parse_chat(body, request, schema=MindIEChatRequest, inbound="mindie"))


def parse_completion(body: bytes, request: web.Request | None = None) -> Request:
    req = openai_parse_completion(body, request, schema=MindIECompletionRequest, inbound="mindie")
    if (req.raw or {}).get("max_tokens") is None:
        del req.params["max_tokens"]  # MindIE's default is maxIterTimes, not OpenAI's 16
    return _mindie_fixups(req)


def _usage(u: Usage | None) -> dict[str, Any] | None:
    if u is None or u.prompt_tokens is None or u.completion_tokens is None:
        return None
    out: dict[str, Any] = {"prompt_tokens": u.prompt_tokens}
    if u.extra and "prompt_tokens_details" in u.extra:
        out["prompt_tokens_details"] = u.extra["prompt_tokens_details"]
    out["completion_tokens"] = u.completion_tokens
    if u.extra and "completion_tokens_details" in u.extra:
        out["completion_tokens_details"] = u.extra["completion_tokens_details"]
    out["total_tokens"] = u.prompt_tokens + u.completion_tokens
    return out


def _finish(reason: Finish | None) -> str:
    return vocab.OPENAI[reason or Finish.EOS]


def render_chat(result: Result | EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(result, Result)
    choices = []
    for c in result.choices:
        msg: dict[str, Any] = {"role": "assistant", "content": c.text}
        if c.reasoning is not None:
            msg["reasoning_content"] = c.reasoning
        msg["tool_calls"] = c.tool_calls or []
        lp = {"content": c.logprobs} if c.logprobs is not None else None
        choices.append({"index": c.index, "message": msg, "logprobs": lp, "finish_reason": _finish(c.finish)})
    out: dict[str, Any] = {
        "id": next_id(),
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "choices": choices,
    }
    usage = _usage(result.usage)
    if usage is not None:
        out["usage"] = usage
    return _dumps(out)


def render_completion(result: Result | EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(result, Result)
    choices = [
        {"index": c.index, "text": c.text, "logprobs": None, "stop_reason": None, "finish_reason": _finish(c.finish)}
        for c in result.choices
    ]
    out: dict[str, Any] = {
        "id": next_id(),
        "object": "text_completion",
        "created": ctx.created,
        "model": ctx.model,
        "choices": choices,
    }
    usage = _usage(result.usage)
    if usage is not None:
        out["usage"] = usage
    return _dumps(out)


class _MindIEChunks(ABC):
    """Shared plumbing: chunk head, held finish (it goes out with usage in the last chunk)."""

    content_type = "text/event-stream"

    def __init__(self, req: Request, ctx: RenderContext, obj: str) -> None:
        head = {"id": next_id(), "object": obj, "created": ctx.created, "model": ctx.model}
        self._head = b"data: " + _dumps(head)[:-1]
        self._finishes: dict[int, Finish] = {}
        self._usage: Usage | None = None
        self._failed = False

    def _frame(self, choice: bytes, usage: bytes = b"") -> bytes:
        return self._head + usage + b',"choices":[' + choice + b"]}\n\n"

    def _collect(self, ev: Event) -> None:
        if type(ev) is FinishEvent:
            assert isinstance(ev, FinishEvent)
            self._finishes[ev.index] = ev.reason
        elif type(ev) is UsageEvent:
            assert isinstance(ev, UsageEvent)
            self._usage = ev.usage

    @abstractmethod
    def _last_choice(self, index: int, reason: Finish) -> bytes:
        """The choice of the closing chunk, which carries the finish reason (and usage)."""

    def error(self, err: GatewayError) -> bytes:
        self._failed = True
        return raw_error(err)

    def end(self) -> bytes:
        if self._failed:
            return b""
        usage = _usage(self._usage)
        items = sorted(self._finishes.items()) or [(0, Finish.EOS)]
        out = b""
        for k, (index, reason) in enumerate(items):
            u = b',"usage":' + _dumps(usage) if usage is not None and k == len(items) - 1 else b""
            out += self._frame(self._last_choice(index, reason), u)
        return out + DONE_FRAME


class ChatStreamRenderer(_MindIEChunks):
    def __init__(self, req: Request, ctx: RenderContext) -> None:
        super().__init__(req, ctx, "chat.completion.chunk")
        self._n = int(req.params.get("n", 1))

    def start(self) -> bytes:
        return b"".join(
            self._frame(b'{"index":%d,"delta":{"role":"assistant","content":""},"finish_reason":null}' % i)
            for i in range(self._n)
        )

    def render(self, events: list[Event]) -> bytes:
        parts = []
        for ev in events:
            choice = chat_delta_choice(ev, b'"role":"assistant",', null_logprobs=False)
            if choice is not None:
                parts.append(self._frame(choice))
            else:
                self._collect(ev)
        return b"".join(parts)

    def _last_choice(self, index: int, reason: Finish) -> bytes:
        return b'{"index":%d,"delta":{"role":"assistant","content":""},"finish_reason":"%b"}' % (
            index,
            _finish(reason).encode(),
        )


class CompletionStreamRenderer(_MindIEChunks):
    def __init__(self, req: Request, ctx: RenderContext) -> None:
        super().__init__(req, ctx, "text_completion")

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        parts = []
        for ev in events:
            if type(ev) is TextDelta:
                assert isinstance(ev, TextDelta)
                parts.append(
                    self._frame(
                        b'{"index":%d,"text":%b,"logprobs":null,"stop_reason":null,"finish_reason":null}'
                        % (ev.index, _dumps(ev.text))
                    )
                )
            else:
                self._collect(ev)
        return b"".join(parts)

    def _last_choice(self, index: int, reason: Finish) -> bytes:
        return b'{"index":%d,"text":"","logprobs":null,"stop_reason":null,"finish_reason":"%b"}' % (
            index,
            _finish(reason).encode(),
        )


# ---- vLLM-style /generate (body with "prompt") ----------------------------------------------

_VLLM_DIRECT = (
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "stop_token_ids",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "ignore_eos",
)


def parse_vllm_generate(data: dict[str, Any]) -> Request:
    m = validate(VllmGenerateRequest, data)
    params: dict[str, Any] = {name: getattr(m, name) for name in _VLLM_DIRECT if getattr(m, name) is not None}
    if params.get("top_k") in (0, -1):
        del params["top_k"]
    if m.max_tokens is not None:
        params["max_tokens"] = m.max_tokens
    if m.stop:
        params["stop"] = [m.stop] if isinstance(m.stop, str) else list(m.stop)
    if m.n not in (None, 1):
        params["n"] = m.n
    if m.best_of not in (None, 1):
        params["best_of"] = m.best_of
    return Request(
        task=Task.COMPLETION, inbound="mindie", prompt=m.prompt, stream=bool(m.stream), params=params, raw=data
    )


def render_vllm(result: Result | EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    """`{"text": [prompt + " " + completion, ...]}`: MindIE joins the two with one space."""
    assert isinstance(result, Result)
    prompt = req.prompt if isinstance(req.prompt, str) else ""
    return _dumps({"text": [prompt + " " + c.text for c in result.choices]})


class VllmStreamRenderer:
    """NUL-terminated JSON objects `{"text": [delta]}` (not SSE); no finish marker."""

    content_type = "application/json"

    def __init__(self, req: Request, ctx: RenderContext) -> None:
        self._n = int(req.params.get("n", 1))

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        out = b""
        for ev in events:
            if type(ev) is TextDelta:
                assert isinstance(ev, TextDelta)
                texts = [""] * self._n
                if ev.index < self._n:
                    texts[ev.index] = ev.text
                out += _dumps({"text": texts}) + b"\0"
        return out

    def error(self, err: GatewayError) -> bytes:
        return raw_error(err)

    def end(self) -> bytes:
        return b""


def load(body: bytes) -> dict[str, Any]:
    return load_object(body)
