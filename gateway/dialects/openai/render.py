"""OpenAI-shaped answers, for the OpenAI dialect and the two that copy its shapes (MindIE's OpenAI
routes, Databricks): whole responses and SSE chunk streams, one renderer each, with a `Flavour`
holding the ways the copies differ. See docs/dialects/openai.md.

Stream renderers build each chunk from byte templates fixed when the stream starts, so a token
costs one JSON string encode and a few concatenations.
"""

import base64
import struct
from collections.abc import Callable
from typing import Any

from gateway import jsonutil
from gateway.codec.contract import RenderContext
from gateway.dialects.openai import params as names
from gateway.neutral.errors import GatewayError
from gateway.neutral.types import Answer, EmbeddingResult, Finish, Request, Result, Task, Usage
from gateway.records import record

_dumps = jsonutil.dumps
# A text that cannot be a model's, and so marks where a text goes in a rendered frame.
MARK = "\x00gateway-text\x00"
MARK_JSON = _dumps(MARK)


def usage_object(u: Usage | None) -> dict[str, Any] | None:
    """OpenAI's usage object, or None when the counts are not known (never invented)."""
    if u is None or u.prompt_tokens is None or u.completion_tokens is None:
        return None
    out: dict[str, Any] = {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }
    if u.extra:
        for k in ("prompt_tokens_details", "completion_tokens_details"):
            if k in u.extra:
                out[k] = u.extra[k]
    return out


def error_object(err: GatewayError) -> dict[str, Any]:
    return {"message": err.message, "type": names.ERRORS[err.kind][1], "param": err.param, "code": err.code}


def error_frame(err: GatewayError) -> bytes:
    return b"data: " + _dumps({"error": error_object(err)}) + b"\n\n"


@record
class Flavour:
    """How a dialect's copy of OpenAI's shapes differs from OpenAI's own."""

    chat_id: Callable[[RenderContext], str]
    completion_id: Callable[[RenderContext], str]
    chat_object: str = "chat.completion"
    completion_model: bool = True  # whole completions name the model
    null_content_with_tools: bool = True  # content is null in an answer that is only tool calls
    always_tool_calls: bool = False  # message.tool_calls even when empty
    # How the model's reasoning is written: OpenAI-style servers' `reasoning_content` field, or
    # Databricks' content parts (a `reasoning` part with its summary text, then a `text` part).
    reasoning_parts: bool = False
    logprobs_when_set: bool = False  # a choice's logprobs only when there are some (after finish_reason)
    completion_stop_reason: bool = False  # completion choices carry `stop_reason` (and null logprobs)
    usage: Callable[[Usage | None], dict[str, Any] | None] = usage_object
    # Streams: finish reasons (and usage) held to the closing chunks, every delta repeating the
    # role, no null logprobs, and nothing more after an error.
    held_finish: bool = False
    error_frame: Callable[[GatewayError], bytes] = error_frame
    # Same-wire pass-through streams forward the usage-only chunk whether or not the client asked.
    passthrough_usage: bool = False


OPENAI = Flavour(chat_id=lambda ctx: "chatcmpl-" + ctx.request_id, completion_id=lambda ctx: "cmpl-" + ctx.request_id)


def finish_word(reason: Finish | None) -> str:
    return names.FINISH[reason or Finish.EOS]


def _with_usage(out: dict[str, Any], fl: Flavour, usage: Usage | None) -> bytes:
    u = fl.usage(usage)
    if u is not None:
        out["usage"] = u
    return _dumps(out)


def reasoning_part(text: str) -> dict[str, Any]:
    return {"type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}


def render_chat(fl: Flavour, result: Result, ctx: RenderContext) -> bytes:
    choices = []
    for c in result.choices:
        content = c.text if (c.text or not c.tool_calls or not fl.null_content_with_tools) else None
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if c.reasoning is not None:
            if fl.reasoning_parts:
                msg["content"] = [reasoning_part(c.reasoning), {"type": "text", "text": content or ""}]
            else:
                msg["reasoning_content"] = c.reasoning
        if c.tool_calls or fl.always_tool_calls:
            msg["tool_calls"] = c.tool_calls or []
        lp = {"content": c.logprobs} if c.logprobs is not None else None
        if fl.logprobs_when_set:
            choice: dict[str, Any] = {"index": c.index, "message": msg, "finish_reason": finish_word(c.finish)}
            if lp is not None:
                choice["logprobs"] = lp
        else:
            choice = {"index": c.index, "message": msg, "logprobs": lp, "finish_reason": finish_word(c.finish)}
        choices.append(choice)
    out = {"id": fl.chat_id(ctx), "object": fl.chat_object, "created": ctx.created, "model": ctx.model}
    out["choices"] = choices
    return _with_usage(out, fl, result.usage)


def completion_logprobs(entries: list[dict[str, Any]] | None, offset: int = 0) -> dict[str, Any] | None:
    """Neutral per-token logprobs (OpenAI chat form) to the legacy completions form."""
    if entries is None:
        return None
    tokens, lps, tops, offsets = [], [], [], []
    pos = offset
    for e in entries:
        tokens.append(e["token"])
        lps.append(e.get("logprob"))
        tops.append({t["token"]: t["logprob"] for t in e.get("top_logprobs") or ()})
        offsets.append(pos)
        pos += len(e["token"])
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def render_completion(fl: Flavour, result: Result, ctx: RenderContext) -> bytes:
    choices = []
    for c in result.choices:
        choice: dict[str, Any] = {"index": c.index, "text": c.text}
        if fl.completion_stop_reason:
            choice.update(logprobs=None, stop_reason=None)
        elif not fl.logprobs_when_set:
            choice["logprobs"] = completion_logprobs(c.logprobs)
        choice["finish_reason"] = finish_word(c.finish)
        if fl.logprobs_when_set and c.logprobs is not None:
            choice["logprobs"] = completion_logprobs(c.logprobs)
        choices.append(choice)
    out: dict[str, Any] = {"id": fl.completion_id(ctx), "object": "text_completion", "created": ctx.created}
    if fl.completion_model:
        out["model"] = ctx.model
    out["choices"] = choices
    return _with_usage(out, fl, result.usage)


def _b64(vec: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()


def _floats(b64: str) -> list[float]:
    raw = base64.b64decode(b64)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def embedding_data(result: EmbeddingResult, base64_vectors: bool) -> list[dict[str, Any]]:
    data = []
    for i, vec in enumerate(result.data):
        if base64_vectors and not isinstance(vec, str):
            vec = _b64(vec)
        elif not base64_vectors and isinstance(vec, str):
            vec = _floats(vec)
        data.append({"object": "embedding", "index": i, "embedding": vec})
    return data


def embedding_usage(u: Usage | None) -> dict[str, Any] | None:
    if u is None or u.prompt_tokens is None:
        return None
    return {"prompt_tokens": u.prompt_tokens, "total_tokens": u.prompt_tokens}


def render_embedding(result: EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    data = embedding_data(result, req.params.encoding_format == "base64")
    out: dict[str, Any] = {"object": "list", "data": data, "model": ctx.model}
    usage = embedding_usage(result.usage)
    if usage is not None:
        out["usage"] = usage
    return _dumps(out)


def result_renderer(fl: Flavour) -> Callable[[Answer, Request, RenderContext], bytes]:
    """The whole-answer renderer of one flavour, for every task."""

    def render(result: Answer, req: Request, ctx: RenderContext) -> bytes:
        if isinstance(result, EmbeddingResult):
            return render_embedding(result, req, ctx)
        if req.task is Task.CHAT:
            return render_chat(fl, result, ctx)
        return render_completion(fl, result, ctx)

    return render
