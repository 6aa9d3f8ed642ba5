"""Databricks answers as clients expect them: the seed's response objects and SSE chunk streams.

Whole responses carry exactly the fields seed 002 lists (chat `object` is "chat.completions",
completions have no `model`, embeddings have an `id`). Streams are OpenAI's chunk streams with
Databricks ids, so the OpenAI dialect's renderers do the work; only the in-band error differs.
"""

from typing import Any

from gateway import jsonutil
from gateway.core import finish as vocab
from gateway.core.errors import GatewayError
from gateway.core.types import EmbeddingResult, Request, Result, Task
from gateway.dialects.base import RenderContext, StreamRenderer
from gateway.dialects.openai.render import (
    ChatStreamRenderer,
    CompletionStreamRenderer,
    PassthroughStreamRenderer,
    completion_logprobs,
    usage_object,
)

CHAT_OBJECT = "chat.completions"  # seed 002's word for a whole chat answer (chunks: chat.completion.chunk)
CHAT_ID = "chatcmpl_"
COMPLETION_ID = "cmpl_"
EMBEDDING_ID = "emb_"


def _finish(reason: Any) -> str:
    return vocab.OPENAI[reason] if reason is not None else "stop"


def render_chat(result: Result, req: Request, ctx: RenderContext) -> dict[str, Any]:
    choices = []
    for c in result.choices:
        msg: dict[str, Any] = {"role": "assistant", "content": c.text if (c.text or not c.tool_calls) else None}
        if c.tool_calls:
            msg["tool_calls"] = c.tool_calls
        choice: dict[str, Any] = {"index": c.index, "message": msg, "finish_reason": _finish(c.finish)}
        if c.logprobs is not None:
            choice["logprobs"] = {"content": c.logprobs}
        choices.append(choice)
    out: dict[str, Any] = {
        "id": CHAT_ID + ctx.request_id,
        "object": CHAT_OBJECT,
        "created": ctx.created,
        "model": ctx.model,
        "choices": choices,
    }
    usage = usage_object(result.usage)
    if usage is not None:
        out["usage"] = usage
    return out


def render_completion(result: Result, req: Request, ctx: RenderContext) -> dict[str, Any]:
    choices = []
    for c in result.choices:
        choice: dict[str, Any] = {"index": c.index, "text": c.text, "finish_reason": _finish(c.finish)}
        if c.logprobs is not None:
            choice["logprobs"] = completion_logprobs(c.logprobs)
        choices.append(choice)
    out: dict[str, Any] = {
        "id": COMPLETION_ID + ctx.request_id,
        "object": "text_completion",
        "created": ctx.created,
        "choices": choices,
    }
    usage = usage_object(result.usage)
    if usage is not None:
        out["usage"] = usage
    return out


def render_embedding(result: EmbeddingResult, req: Request, ctx: RenderContext) -> dict[str, Any]:
    data = [{"object": "embedding", "index": i, "embedding": vec} for i, vec in enumerate(result.data)]
    out: dict[str, Any] = {"id": EMBEDDING_ID + ctx.request_id, "object": "list", "model": ctx.model, "data": data}
    u = result.usage
    if u is not None and u.prompt_tokens is not None:
        out["usage"] = {"prompt_tokens": u.prompt_tokens, "total_tokens": u.prompt_tokens}
    return out


def render_result(result: Result | EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    if isinstance(result, EmbeddingResult):
        return jsonutil.dumps(render_embedding(result, req, ctx))
    if req.task is Task.CHAT:
        return jsonutil.dumps(render_chat(result, req, ctx))
    return jsonutil.dumps(render_completion(result, req, ctx))


def error_frame(err: GatewayError) -> bytes:
    """The in-band stream error: Databricks' error body, plus an `error` object for OpenAI clients.

    Databricks documents no mid-stream error event. Its body keys (`error_code`, `message`) come
    first so Databricks-aware code reads it as an error; the `error` object is what the OpenAI
    SDK (the client Databricks recommends) checks in a chunk before it raises.
    """
    from gateway.dialects.databricks.inbound import error_status_code

    code = error_status_code(err)[1]
    body = {"error_code": code, "message": err.message, "error": {"error_code": code, "message": err.message}}
    return b"data: " + jsonutil.dumps(body) + b"\n\n"


class ChatStream(ChatStreamRenderer):
    def __init__(self, req: Request, ctx: RenderContext) -> None:
        super().__init__(req, ctx, id_prefix=CHAT_ID)

    def error(self, err: GatewayError) -> bytes:
        return error_frame(err)


class CompletionStream(CompletionStreamRenderer):
    def __init__(self, req: Request, ctx: RenderContext) -> None:
        super().__init__(req, ctx, id_prefix=COMPLETION_ID)

    def error(self, err: GatewayError) -> bytes:
        return error_frame(err)


class PassthroughStream(PassthroughStreamRenderer):
    """Databricks upstream to Databricks client: chunks forwarded as they came, usage-only ones too."""

    def __init__(self, req: Request, ctx: RenderContext) -> None:
        super().__init__(req, ctx)
        self._include_usage = True

    def error(self, err: GatewayError) -> bytes:
        return error_frame(err)


def stream_renderer(req: Request, ctx: RenderContext) -> StreamRenderer:
    if ctx.passthrough:
        return PassthroughStream(req, ctx)
    if req.task is Task.CHAT:
        return ChatStream(req, ctx)
    return CompletionStream(req, ctx)
