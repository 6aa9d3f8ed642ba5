"""OpenAI as clients speak it: request parsing into the neutral form, routes, error bodies."""

import time
from typing import Any

from aiohttp import web

from gateway import jsonutil
from gateway.core.errors import GatewayError, Kind, NotFound
from gateway.core.exchange import check_auth, handler
from gateway.core.routing import RouteGroup
from gateway.core.types import Message, Request, Task
from gateway.core.validation import load_object, validate
from gateway.dialects.base import Endpoint
from gateway.dialects.openai import render
from gateway.dialects.openai.schema import ChatCompletionRequest, CompletionRequest, EmbeddingRequest

# Request fields copied into neutral params as they are (when set), for chat and completions.
_SHARED = (
    "frequency_penalty",
    "logit_bias",
    "presence_penalty",
    "seed",
    "temperature",
    "top_p",
    "user",
    "top_k",
    "min_p",
    "repetition_penalty",
    "stop_token_ids",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "ignore_eos",
    "max_tokens",
)
_CHAT_ONLY = ("tools", "tool_choice", "response_format", "parallel_tool_calls", "chat_template_kwargs", "top_logprobs")


def copy_set(data: dict[str, Any], names: tuple[str, ...], params: dict[str, Any]) -> None:
    """Copy the named body fields the client set into neutral params, as they are."""
    for name in names:
        v = data.get(name)
        if v is not None:
            params[name] = v


def common_params(data: dict[str, Any], m: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """Params OpenAI-shaped bodies share: `names` as they are, `n` when not 1, `stop` as a list."""
    params: dict[str, Any] = {}
    copy_set(data, names, params)
    if m.n is not None and m.n != 1:
        params["n"] = m.n
    if m.stop:
        params["stop"] = [m.stop] if isinstance(m.stop, str) else list(m.stop)
    return params


def messages_from(items: list[dict[str, Any]]) -> list[Message]:
    """Validated OpenAI-form message dicts to neutral messages."""
    return [
        Message(
            role=msg["role"],
            content=msg.get("content"),
            name=msg.get("name"),
            tool_calls=msg.get("tool_calls"),
            tool_call_id=msg.get("tool_call_id"),
        )
        for msg in items
    ]


def parse_chat(
    body: bytes,
    request: web.Request | None = None,
    *,
    schema: type[ChatCompletionRequest] = ChatCompletionRequest,
    inbound: str = "openai",
) -> Request:
    """`schema` and `inbound` let OpenAI-flavoured dialects (MindIE) reuse this with their own limits."""
    data = load_object(body)
    m = validate(schema, data)
    params = common_params(data, m, _SHARED)
    if m.max_completion_tokens is not None:
        params["max_tokens"] = m.max_completion_tokens
    copy_set(data, _CHAT_ONLY, params)
    if m.logprobs:
        params["logprobs"] = True
    messages = messages_from(data["messages"])
    return Request(
        task=Task.CHAT,
        inbound=inbound,
        model=m.model,
        messages=messages,
        stream=bool(m.stream),
        include_usage=bool(m.stream_options and m.stream_options.include_usage),
        params=params,
        raw=data,
    )


def parse_completion(
    body: bytes,
    request: web.Request | None = None,
    *,
    schema: type[CompletionRequest] = CompletionRequest,
    inbound: str = "openai",
) -> Request:
    data = load_object(body)
    m = validate(schema, data)
    params = common_params(data, m, _SHARED)
    if m.logprobs is not None:
        params["logprobs"] = True
        params["top_logprobs"] = m.logprobs
    for name in ("best_of", "echo", "suffix"):
        v = data.get(name)
        if v is not None and v is not False:
            params[name] = v
    if params.get("best_of") == 1:
        del params["best_of"]
    if m.max_tokens is None:
        params["max_tokens"] = 16  # the API's documented default for completions
    prompt = data["prompt"]
    req = Request(
        task=Task.COMPLETION,
        inbound=inbound,
        model=m.model,
        stream=bool(m.stream),
        include_usage=bool(m.stream_options and m.stream_options.include_usage),
        params=params,
        raw=data,
    )
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], str):
        req.prompt_ids = prompt
    else:
        req.prompt = prompt
    return req


def parse_embedding(body: bytes, request: web.Request | None = None) -> Request:
    data = load_object(body)
    m = validate(EmbeddingRequest, data)
    params: dict[str, Any] = {}
    if m.encoding_format == "base64":
        params["encoding_format"] = "base64"
    if m.dimensions is not None:
        params["dimensions"] = m.dimensions
    if m.user is not None:
        params["user"] = m.user
    inp = data["input"]
    if isinstance(inp, str) or (inp and isinstance(inp[0], int)):
        inp = [inp]
    return Request(task=Task.EMBEDDING, inbound="openai", model=m.model, input=inp, params=params, raw=data)


CHAT = Endpoint(parse_chat, render.render_chat, render.chat_stream_renderer)
COMPLETION = Endpoint(parse_completion, render.render_completion, render.completion_stream_renderer)
EMBEDDING = Endpoint(parse_embedding, render.render_embedding, None)

_TYPES = {
    Kind.VALIDATION: "invalid_request_error",
    Kind.AUTH: "invalid_request_error",
    Kind.PERMISSION: "invalid_request_error",
    Kind.NOT_FOUND: "invalid_request_error",
    Kind.TOO_LARGE: "invalid_request_error",
    Kind.CLIENT_TIMEOUT: "invalid_request_error",
    Kind.UNSUPPORTED: "invalid_request_error",
    Kind.RATE_LIMIT: "rate_limit_exceeded",
    Kind.OVERLOADED: "server_error",
    Kind.UPSTREAM: "server_error",
    Kind.TIMEOUT: "server_error",
    Kind.UNAVAILABLE: "server_error",
    Kind.INTERNAL: "server_error",
}


def error_object(err: GatewayError) -> dict[str, Any]:
    return {"message": err.message, "type": _TYPES[err.kind], "param": err.param, "code": err.code}


class OpenAIInbound:
    name = "openai"

    def paths(self) -> list[tuple[str, str]]:
        return [
            ("POST", "/v1/chat/completions"),
            ("POST", "/v1/completions"),
            ("POST", "/v1/embeddings"),
            ("GET", "/v1/models"),
            ("GET", "/v1/models/{model}"),
        ]

    def error_response(self, err: GatewayError) -> web.Response:
        return web.Response(
            status=err.status, body=jsonutil.dumps({"error": error_object(err)}), content_type="application/json"
        )

    def mount(self, router: web.UrlDispatcher, prefix: str, group: RouteGroup) -> None:
        started = int(time.time())

        async def list_models(request: web.Request) -> web.Response:
            try:
                check_auth(request)
            except GatewayError as e:
                return self.error_response(e)
            data = [{"id": m, "object": "model", "created": started, "owned_by": "gateway"} for m in group.model_ids()]
            return web.json_response({"object": "list", "data": data}, dumps=jsonutil.dumps_str)

        async def get_model(request: web.Request) -> web.Response:
            model = request.match_info["model"]
            try:
                check_auth(request)
                if model not in group.model_ids():
                    raise NotFound(f"The model {model!r} does not exist", param="model", code="model_not_found")
            except GatewayError as e:
                return self.error_response(e)
            body = {"id": model, "object": "model", "created": started, "owned_by": "gateway"}
            return web.json_response(body, dumps=jsonutil.dumps_str)

        router.add_post(prefix + "/v1/chat/completions", handler(CHAT, group, self))
        router.add_post(prefix + "/v1/completions", handler(COMPLETION, group, self))
        router.add_post(prefix + "/v1/embeddings", handler(EMBEDDING, group, self))
        router.add_get(prefix + "/v1/models", list_models)
        # Model ids may hold slashes ("meta-llama/Llama-3.1-8B"), as the SDK sends them.
        router.add_get(prefix + "/v1/models/{model:.+}", get_model)
