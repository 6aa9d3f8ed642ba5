"""Databricks answers as clients expect them: its response objects and OpenAI's chunk streams.

Whole responses carry exactly the fields Databricks' reference lists (completions have no
`model`, embeddings have an `id`); everything else is OpenAI's shape with Databricks ids, rendered
by the OpenAI dialect with this flavour. See docs/dialects/databricks.md.
"""

from typing import Any

from gateway import jsonutil
from gateway.codec.contract import RenderContext
from gateway.codec.errors import ErrorTable, stated
from gateway.dialects.openai import render as openai
from gateway.dialects.openai import stream as openai_stream
from gateway.neutral.errors import GatewayError, Kind, Unavailable, UpstreamClass, UpstreamError
from gateway.neutral.types import Answer, EmbeddingResult, Request

EMBEDDING_ID = "emb_"


# Databricks' status and `error_code` for each kind.
ERRORS: ErrorTable = {
    Kind.VALIDATION: (400, "INVALID_PARAMETER_VALUE"),
    Kind.UNSUPPORTED: (400, "INVALID_PARAMETER_VALUE"),
    Kind.AUTH: (401, "UNAUTHENTICATED"),
    Kind.PERMISSION: (403, "PERMISSION_DENIED"),
    Kind.NOT_FOUND: (404, "RESOURCE_DOES_NOT_EXIST"),
    Kind.TOO_LARGE: (413, "BAD_REQUEST"),
    Kind.CLIENT_TIMEOUT: (408, "BAD_REQUEST"),
    Kind.RATE_LIMIT: (429, "REQUEST_LIMIT_EXCEEDED"),
    Kind.TIMEOUT: (504, "DEADLINE_EXCEEDED"),
    Kind.UNAVAILABLE: (503, "TEMPORARILY_UNAVAILABLE"),
    Kind.OVERLOADED: (503, "TEMPORARILY_UNAVAILABLE"),
    Kind.UPSTREAM: (500, "INTERNAL_ERROR"),
    Kind.INTERNAL: (500, "INTERNAL_ERROR"),
}


def error_status_code(err: GatewayError) -> tuple[int, str]:
    """The HTTP status and Databricks `error_code` for a gateway error: a backend that cannot be
    reached is the endpoint being unavailable, as Databricks says it."""
    if isinstance(err, UpstreamError) and err.upstream_class is UpstreamClass.CONNECT:
        return stated(ERRORS, Unavailable(err.message))
    return stated(ERRORS, err)


def error_body(err: GatewayError) -> dict[str, Any]:
    return {"error_code": error_status_code(err)[1], "message": err.message}


def error_frame(err: GatewayError) -> bytes:
    """The in-band stream error: Databricks' error body, plus an `error` object for OpenAI clients.

    Databricks documents no mid-stream error event. Its body keys (`error_code`, `message`) come
    first so Databricks-aware code reads it as an error; the `error` object is what the OpenAI
    SDK (the client Databricks recommends) checks in a chunk before it raises.
    """
    code = error_status_code(err)[1]
    body = {"error_code": code, "message": err.message, "error": {"error_code": code, "message": err.message}}
    return b"data: " + jsonutil.dumps(body) + b"\n\n"


FLAVOUR = openai.Flavour(
    chat_id=lambda ctx: "chatcmpl_" + ctx.request_id,
    completion_id=lambda ctx: "cmpl_" + ctx.request_id,
    chat_object="chat.completion",
    completion_model=False,
    reasoning_parts=True,
    logprobs_when_set=True,
    error_frame=error_frame,
    passthrough_usage=True,
)
_ANSWER = openai.result_renderer(FLAVOUR)


def render_embedding(result: EmbeddingResult, req: Request, ctx: RenderContext) -> dict[str, Any]:
    data = openai.embedding_data(result, base64_vectors=False)
    out: dict[str, Any] = {"id": EMBEDDING_ID + ctx.request_id, "object": "list", "model": ctx.model, "data": data}
    usage = openai.embedding_usage(result.usage)
    if usage is not None:
        out["usage"] = usage
    return out


def render_result(result: Answer, req: Request, ctx: RenderContext) -> bytes:
    if isinstance(result, EmbeddingResult):
        return jsonutil.dumps(render_embedding(result, req, ctx))
    return _ANSWER(result, req, ctx)


stream_renderer = openai_stream.stream_renderer(FLAVOUR)
