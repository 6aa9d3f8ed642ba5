"""Databricks Model Serving as clients speak it: request parsing, routes, error bodies.

`POST /serving-endpoints/{name}/invocations` takes chat, completions or embeddings and tells
them apart by the body (`messages`, `prompt`, `input`), the way Databricks' query API unions
them; `{name}` picks the route. The OpenAI-client form (`/serving-endpoints/chat/completions`,
`/completions`, `/embeddings`, with `model` = endpoint name) parses the same bodies, so
`openai.OpenAI(base_url=<gateway>/serving-endpoints)` works.
"""

from typing import Any

from aiohttp import web

from gateway import jsonutil
from gateway.core.errors import GatewayError, InvalidRequest, Kind, UpstreamClass
from gateway.core.exchange import check_auth, handler
from gateway.core.routing import RouteGroup
from gateway.core.types import Request, Task
from gateway.core.validation import load_object, validate
from gateway.dialects.base import Endpoint
from gateway.dialects.databricks import render
from gateway.dialects.databricks.schema import ChatRequest, CompletionRequest, EmbeddingRequest
from gateway.dialects.openai.inbound import common_params, copy_set, messages_from

# Fields copied into neutral params as they are, when set.
_SHARED = ("temperature", "top_p", "top_k", "max_tokens", "seed", "presence_penalty", "frequency_penalty", "user")
_CHAT_ONLY = ("tools", "tool_choice", "response_format", "top_logprobs")
# Bodies of custom MLflow models and feature serving, which this gateway does not serve.
_CUSTOM_KEYS = ("dataframe_split", "dataframe_records", "instances", "inputs")


def _model(data: dict[str, Any], request: web.Request | None) -> str | None:
    if request is not None and "name" in request.match_info:
        return request.match_info["name"]
    model = data.get("model")
    return model if isinstance(model, str) else None


def _include_usage(m: Any) -> bool:
    return bool(m.stream and m.stream_options is not None and m.stream_options.include_usage)


def parse_chat(body: bytes, request: web.Request | None = None, data: dict[str, Any] | None = None) -> Request:
    data = load_object(body) if data is None else data
    m = validate(ChatRequest, data)
    params = common_params(data, m, _SHARED)
    copy_set(data, _CHAT_ONLY, params)
    if m.logprobs:
        params["logprobs"] = True
    messages = messages_from(data["messages"])
    return Request(
        task=Task.CHAT,
        inbound="databricks",
        model=_model(data, request),
        messages=messages,
        stream=bool(m.stream),
        include_usage=_include_usage(m),
        params=params,
        raw=data,
    )


def parse_completion(body: bytes, request: web.Request | None = None, data: dict[str, Any] | None = None) -> Request:
    data = load_object(body) if data is None else data
    m = validate(CompletionRequest, data)
    params = common_params(data, m, _SHARED)
    if m.echo:
        params["echo"] = True
    if m.suffix:
        params["suffix"] = m.suffix
    if m.error_behavior == "truncate":
        params["error_behavior"] = "truncate"
    prompt = data["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return Request(
        task=Task.COMPLETION,
        inbound="databricks",
        model=_model(data, request),
        prompt=prompt,
        stream=bool(m.stream),
        include_usage=_include_usage(m),
        params=params,
        raw=data,
    )


def parse_embedding(body: bytes, request: web.Request | None = None, data: dict[str, Any] | None = None) -> Request:
    data = load_object(body) if data is None else data
    m = validate(EmbeddingRequest, data)
    params: dict[str, Any] = {}
    if m.instruction:
        params["instruction"] = m.instruction
    inp = data["input"]
    return Request(
        task=Task.EMBEDDING,
        inbound="databricks",
        model=_model(data, request),
        input=[inp] if isinstance(inp, str) else inp,
        params=params,
        raw=data,
    )


def parse_invocation(body: bytes, request: web.Request | None = None) -> Request:
    """One invocations body: the task is whichever of messages / prompt / input it carries."""
    data = load_object(body)
    present = [k for k in ("messages", "prompt", "input") if k in data]
    if len(present) > 1:
        raise InvalidRequest(
            f"The request carries {' and '.join(present)}; send exactly one of messages (chat), "
            "prompt (completions) or input (embeddings)",
            param=present[1],
        )
    if not present:
        custom = [k for k in _CUSTOM_KEYS if k in data]
        what = f" ({custom[0]} is for custom MLflow models, which this gateway does not serve)" if custom else ""
        raise InvalidRequest(
            f"The request needs messages (chat), prompt (completions) or input (embeddings){what}",
            param=custom[0] if custom else "messages",
        )
    parse = {"messages": parse_chat, "prompt": parse_completion, "input": parse_embedding}[present[0]]
    return parse(body, request, data)


def _openai_form(parse: Any) -> Any:
    """The OpenAI-client paths: same bodies, and `model` (the endpoint name) is required."""

    def parse_form(body: bytes, request: web.Request | None = None) -> Request:
        data = load_object(body)
        if not isinstance(data.get("model"), str) or not data["model"]:
            raise InvalidRequest("model: the serving endpoint name is required", param="model")
        req: Request = parse(body, None, data)
        return req

    return parse_form


def _path_name(request: web.Request) -> str | None:
    return request.match_info.get("name")


INVOCATIONS = Endpoint(parse_invocation, render.render_result, render.stream_renderer, path_model=_path_name)
CHAT = Endpoint(_openai_form(parse_chat), render.render_result, render.stream_renderer)
COMPLETION = Endpoint(_openai_form(parse_completion), render.render_result, render.stream_renderer)
EMBEDDING = Endpoint(_openai_form(parse_embedding), render.render_result, None)


def error_status_code(err: GatewayError) -> tuple[int, str]:
    """The HTTP status and Databricks `error_code` for a gateway error."""
    kind = err.kind
    if kind is Kind.VALIDATION or kind is Kind.UNSUPPORTED:
        return 400, "INVALID_PARAMETER_VALUE"
    if kind is Kind.AUTH:
        return 401, "UNAUTHENTICATED"
    if kind is Kind.PERMISSION:
        return 403, "PERMISSION_DENIED"
    if kind is Kind.NOT_FOUND:
        return 404, "RESOURCE_DOES_NOT_EXIST"
    if kind is Kind.TOO_LARGE:
        return 413, "BAD_REQUEST"
    if kind is Kind.CLIENT_TIMEOUT:
        return 408, "BAD_REQUEST"
    if kind is Kind.RATE_LIMIT:
        return 429, "REQUEST_LIMIT_EXCEEDED"
    if kind is Kind.TIMEOUT:
        return 504, "DEADLINE_EXCEEDED"
    if kind is Kind.UNAVAILABLE or kind is Kind.OVERLOADED:
        return 503, "TEMPORARILY_UNAVAILABLE"
    if kind is Kind.UPSTREAM and getattr(err, "upstream_class", None) is UpstreamClass.CONNECT:
        return 503, "TEMPORARILY_UNAVAILABLE"
    return 500, "INTERNAL_ERROR"


def error_body(err: GatewayError) -> dict[str, Any]:
    return {"error_code": error_status_code(err)[1], "message": err.message}


class DatabricksInbound:
    name = "databricks"

    def paths(self) -> list[tuple[str, str]]:
        return [
            ("POST", "/serving-endpoints/{name}/invocations"),
            ("POST", "/serving-endpoints/chat/completions"),
            ("POST", "/serving-endpoints/completions"),
            ("POST", "/serving-endpoints/embeddings"),
            ("GET", "/api/2.0/serving-endpoints/{name}"),
        ]

    def error_response(self, err: GatewayError) -> web.Response:
        status, _ = error_status_code(err)
        return web.Response(status=status, body=jsonutil.dumps(error_body(err)), content_type="application/json")

    def mount(self, router: web.UrlDispatcher, prefix: str, group: RouteGroup) -> None:
        async def get_endpoint(request: web.Request) -> web.Response:
            # The control-plane view of one endpoint, enough for a readiness probe (state.ready).
            name = request.match_info["name"]
            try:
                check_auth(request)
                group.select(name)
            except GatewayError as e:
                return self.error_response(e)
            body = {"name": name, "state": {"ready": "READY", "config_update": "NOT_UPDATING"}}
            return web.Response(body=jsonutil.dumps(body), content_type="application/json")

        router.add_post(prefix + "/serving-endpoints/{name}/invocations", handler(INVOCATIONS, group, self))
        router.add_post(prefix + "/serving-endpoints/chat/completions", handler(CHAT, group, self))
        router.add_post(prefix + "/serving-endpoints/completions", handler(COMPLETION, group, self))
        router.add_post(prefix + "/serving-endpoints/embeddings", handler(EMBEDDING, group, self))
        router.add_get(prefix + "/api/2.0/serving-endpoints/{name}", get_endpoint)
