"""Talking to an OpenAI-compatible server: request bodies, response and stream parsing.

`options.extensions: vllm` marks a vLLM-style server (vLLM, SGLang, MindIE's OpenAI routes,
LiteLLM), which takes the sampling extensions the public API lacks.
"""

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gateway import jsonutil
from gateway.core.errors import UpstreamClass, UpstreamError
from gateway.core.finish import parse_finish
from gateway.core.params import Fate
from gateway.core.routing import Backend
from gateway.core.types import (
    Choice,
    EmbeddingResult,
    Event,
    FinishEvent,
    Frame,
    Message,
    ReasoningDelta,
    Request,
    Result,
    Task,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageEvent,
)
from gateway.dialects.base import UpstreamCall
from gateway.sse import DONE, SSEDecoder


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    extensions: Literal["none", "vllm"] = "none"


_PUBLIC: dict[str, Fate] = {
    name: Fate.MAP
    for name in (
        "stop",
        "n",
        "tools",
        "tool_choice",
        "response_format",
        "logprobs",
        "top_logprobs",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "user",
        "parallel_tool_calls",
        "echo",
        "suffix",
        "best_of",
        "do_sample",
        "encoding_format",
        "dimensions",
    )
}
_VLLM: dict[str, Fate] = {
    **_PUBLIC,
    **{
        name: Fate.MAP
        for name in (
            "top_k",
            "min_p",
            "repetition_penalty",
            "stop_token_ids",
            "include_stop_str_in_output",
            "skip_special_tokens",
            "ignore_eos",
            "chat_template_kwargs",
        )
    },
}
# Neutral params sent under their own name (after the fate policy kept them).
_DIRECT = tuple(k for k in _VLLM if k not in ("do_sample", "logprobs", "top_logprobs", "encoding_format"))
_PATHS = {Task.CHAT: "/v1/chat/completions", Task.COMPLETION: "/v1/completions", Task.EMBEDDING: "/v1/embeddings"}


def message_dict(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.name is not None:
        out["name"] = m.name
    if m.tool_calls:
        out["tool_calls"] = m.tool_calls
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def usage_from(obj: Any) -> Usage | None:
    if not isinstance(obj, dict):
        return None
    extra = {k: obj[k] for k in ("prompt_tokens_details", "completion_tokens_details") if obj.get(k)}
    return Usage(obj.get("prompt_tokens"), obj.get("completion_tokens"), extra or None)


def chat_logprobs(lp: Any) -> list[dict[str, Any]] | None:
    content = lp.get("content") if isinstance(lp, dict) else None
    return content if isinstance(content, list) else None


def completion_logprobs_to_neutral(lp: Any) -> list[dict[str, Any]] | None:
    if not isinstance(lp, dict) or not isinstance(lp.get("tokens"), list):
        return None
    tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
    return [
        {
            "token": tok,
            "logprob": val,
            "top_logprobs": [{"token": k, "logprob": v} for k, v in (top or {}).items()],
        }
        for tok, val, top in zip(lp["tokens"], lp.get("token_logprobs") or [], tops, strict=False)
    ]


class OpenAIOutbound:
    name = "openai"
    shared_credentials = False
    options_model: type[BaseModel] = Options
    # A list of prompts goes upstream in one completions request (see core.batch).
    batch_prompts = True

    def fates(self, backend: Backend, req: Request) -> Mapping[str, Fate]:
        vllm = getattr(backend.options, "extensions", "none") == "vllm"
        return _VLLM if vllm else _PUBLIC

    def build(self, req: Request, backend: Backend) -> UpstreamCall:
        path = _PATHS[req.task]
        model = backend.model or req.model
        if req.inbound == "openai" and req.raw is not None:
            # Same dialect: forward every field the client sent, known to us or not.
            body = dict(req.raw)
            body["model"] = model
            if req.stream:
                # Always ask for usage, for the metrics; the renderer hides it if unasked.
                body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
            return UpstreamCall(path, jsonutil.dumps(body), req.stream, passthrough=True, state=req)
        vllm = getattr(backend.options, "extensions", "none") == "vllm"
        body = request_body(req, model, vllm)
        return UpstreamCall(path, jsonutil.dumps(body), req.stream, state=req)

    def parse_result(self, call: UpstreamCall, body: bytes) -> Result | EmbeddingResult:
        obj = jsonutil.loads(body)
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        if obj.get("error"):
            raise UpstreamError(f"backend error: {_error_text(obj)}", upstream_class=UpstreamClass.PROTOCOL)
        req: Request = call.state
        if req.task is Task.EMBEDDING:
            items = sorted(obj["data"], key=lambda d: d.get("index", 0))
            return EmbeddingResult([d["embedding"] for d in items], usage_from(obj.get("usage")), obj.get("model"))
        choices = []
        for c in obj["choices"]:
            if req.task is Task.CHAT:
                msg = c.get("message") or {}
                choices.append(
                    Choice(
                        index=c.get("index", 0),
                        text=msg.get("content") or "",
                        reasoning=msg.get("reasoning_content"),
                        tool_calls=msg.get("tool_calls") or None,
                        finish=parse_finish(c.get("finish_reason")),
                        logprobs=chat_logprobs(c.get("logprobs")),
                    )
                )
            else:
                choices.append(
                    Choice(
                        index=c.get("index", 0),
                        text=c.get("text") or "",
                        finish=parse_finish(c.get("finish_reason")),
                        logprobs=completion_logprobs_to_neutral(c.get("logprobs")),
                    )
                )
        return Result(choices, usage_from(obj.get("usage")), obj.get("model"))

    def stream_parser(self, call: UpstreamCall) -> "OpenAIStreamParser":
        req: Request = call.state
        return OpenAIStreamParser(req.task is Task.CHAT, call.passthrough)

    def error_message(self, status: int, body: bytes) -> str:
        try:
            obj = jsonutil.loads(body)
        except jsonutil.JSONDecodeError:
            return body.decode("utf-8", "replace").strip()[:500] or "(empty body)"
        return _error_text(obj)

    def health_path(self, backend: Backend) -> str:
        return "/v1/models"

    def models(self, body: bytes) -> list[str]:
        obj = jsonutil.loads(body)
        return [m["id"] for m in obj.get("data", []) if isinstance(m, dict) and "id" in m]


def request_body(req: Request, model: str | None, vllm: bool) -> dict[str, Any]:
    """The OpenAI request body for a neutral request (also used by OpenAI-flavoured outbounds)."""
    p = req.params
    body: dict[str, Any] = {"model": model}
    if req.task is Task.CHAT:
        body["messages"] = [message_dict(m) for m in req.messages or ()]
    elif req.task is Task.COMPLETION:
        body["prompt"] = req.prompt_ids if req.prompt_ids is not None else req.prompt
    else:
        body["input"] = req.input
        if "encoding_format" in p:
            body["encoding_format"] = p["encoding_format"]
    for name in _DIRECT:
        if name in p:
            body[name] = p[name]
    if "max_tokens" in p:
        key = "max_completion_tokens" if req.task is Task.CHAT and not vllm else "max_tokens"
        body[key] = p["max_tokens"]
    for name in ("temperature", "top_p"):
        if name in p:
            body[name] = p[name]
    if p.get("do_sample") is False and "temperature" not in p:
        body["temperature"] = 0.0  # greedy, the way OpenAI-style servers say it
    if p.get("logprobs"):
        if req.task is Task.CHAT:
            body["logprobs"] = True
            if "top_logprobs" in p:
                body["top_logprobs"] = p["top_logprobs"]
        else:
            body["logprobs"] = p.get("top_logprobs", 0)
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _error_text(obj: Any) -> str:
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        if isinstance(err, str):
            return err
    return str(obj)[:500]


class OpenAIStreamParser:
    """Chat or completion chunks from an OpenAI-style SSE stream, to neutral events."""

    __slots__ = ("_chat", "_decoder", "_done", "_error", "_finished", "_passthrough")

    def __init__(self, chat: bool, passthrough: bool = False) -> None:
        self._decoder = SSEDecoder()
        self._chat = chat
        self._passthrough = passthrough
        self._done = False
        self._finished = False
        # A fault found in a read that also carried good events: those go out first, then this.
        self._error: Exception | None = None

    def feed(self, data: bytes) -> list[Event]:
        if self._error is not None:
            raise self._error
        out: list[Event] = []
        try:
            for ev in self._decoder.feed(data):
                self._event(ev.data, out)
            self._check_stray()
        except (UpstreamError, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
            # How reads are cut must not decide whether the tokens before a fault reach the client.
            if not out:
                raise
            self._error = e
        return out

    def _check_stray(self) -> None:
        if self._decoder.stray:
            text = b" ".join(self._decoder.stray).decode("utf-8", "replace")[:500]
            raise UpstreamError(f"backend broke off the stream: {text}", upstream_class=UpstreamClass.MIDSTREAM)

    def close(self) -> list[Event]:
        if self._error is not None:
            raise self._error
        out: list[Event] = []
        for ev in self._decoder.close():
            self._event(ev.data, out)
        self._check_stray()
        if not self._done and not self._finished:
            raise UpstreamError("backend stream ended before it was complete", upstream_class=UpstreamClass.MIDSTREAM)
        return out

    def _event(self, data: bytes, out: list[Event]) -> None:
        if data == DONE:
            self._done = True
            return
        obj = jsonutil.loads(data)
        if obj.get("error"):
            raise UpstreamError(f"backend error mid-stream: {_error_text(obj)}", upstream_class=UpstreamClass.MIDSTREAM)
        choices = obj.get("choices") or ()
        if self._passthrough:
            out.append(Frame(data, usage_only=not choices and bool(obj.get("usage"))))
        for c in choices:
            i = c.get("index", 0)
            if self._chat:
                delta = c.get("delta") or {}
                text = delta.get("content")
                if text:
                    out.append(TextDelta(text, i, chat_logprobs(c.get("logprobs"))))
                reasoning = delta.get("reasoning_content")
                if reasoning:
                    out.append(ReasoningDelta(reasoning, i))
                for tc in delta.get("tool_calls") or ():
                    fn = tc.get("function") or {}
                    out.append(
                        ToolCallDelta(tc.get("index", 0), tc.get("id"), fn.get("name"), fn.get("arguments") or "", i)
                    )
            else:
                text = c.get("text")
                if text:
                    out.append(TextDelta(text, i, completion_logprobs_to_neutral(c.get("logprobs"))))
            reason = parse_finish(c.get("finish_reason"))
            if reason is not None:
                self._finished = True
                out.append(FinishEvent(reason, i))
        usage = obj.get("usage")
        if usage:
            u = usage_from(usage)
            if u is not None:
                out.append(UsageEvent(u))
