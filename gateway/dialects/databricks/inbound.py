"""Databricks Model Serving as clients speak it: request parsing, the paths, error bodies.

`POST /serving-endpoints/{name}/invocations` takes chat, completions or embeddings and tells
them apart by the body (`messages`, `prompt`, `input`), the way Databricks' query API unions
them; `{name}` picks the route. The OpenAI-client form (`/serving-endpoints/chat/completions`,
`/completions`, `/embeddings`, with `model` = endpoint name) parses the same bodies, so
`openai.OpenAI(base_url=<gateway>/serving-endpoints)` works. See docs/dialects/databricks.md.
"""

from collections.abc import Callable, Sequence
from typing import Any

from gateway import jsonutil
from gateway.codec.contract import Caller, Endpoint, GroupView, Mount, PathValues, RenderContext, Reply
from gateway.codec.validation import load_object, validate
from gateway.dialects.databricks import params as names
from gateway.dialects.databricks import render
from gateway.dialects.databricks.outbound import WIRE
from gateway.dialects.databricks.schema import ChatRequest, CompletionRequest, EmbeddingRequest
from gateway.dialects.openai.inbound import messages_from, read_params
from gateway.neutral import params as neutral
from gateway.neutral.errors import GatewayError, InvalidRequest
from gateway.neutral.types import Answer, Request, Task

# Bodies of custom MLflow models and feature serving, which this gateway does not serve.
_CUSTOM_KEYS = ("dataframe_split", "dataframe_records", "instances", "inputs")
Parse = Callable[[dict[str, Any], PathValues | None], Request]


def _model(data: dict[str, Any], path: PathValues | None) -> str | None:
    if path is not None and "name" in path:
        return path["name"]
    model = data.get("model")
    return model if isinstance(model, str) else None


def _include_usage(m: Any) -> bool:
    return bool(m.stream and m.stream_options is not None and m.stream_options.include_usage)


def parse_chat(data: dict[str, Any], path: PathValues | None = None) -> Request:
    m = validate(ChatRequest, data)
    return Request(
        task=Task.CHAT,
        wire=WIRE,
        model=_model(data, path),
        messages=messages_from(data["messages"]),
        stream=bool(m.stream),
        include_usage=_include_usage(m),
        params=read_params(data, names.CHAT_IN, logprobs=True if m.logprobs else None),
        raw=data,
    )


def parse_completion(data: dict[str, Any], path: PathValues | None = None) -> Request:
    m = validate(CompletionRequest, data)
    more = {"error_behavior": "truncate"} if m.error_behavior == "truncate" else {}
    values = {**names.COMPLETION_IN.read(data), **more}
    if not m.echo:
        values.pop("echo", None)
    if not m.suffix:
        values.pop("suffix", None)
    prompt = data["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return Request(
        task=Task.COMPLETION,
        wire=WIRE,
        model=_model(data, path),
        prompt=prompt,
        stream=bool(m.stream),
        include_usage=_include_usage(m),
        params=neutral.make(values),
        raw=data,
    )


def parse_embedding(data: dict[str, Any], path: PathValues | None = None) -> Request:
    m = validate(EmbeddingRequest, data)
    values = names.EMBEDDING_IN.read(data) if m.instruction else {}
    inp = data["input"]
    return Request(
        task=Task.EMBEDDING,
        wire=WIRE,
        model=_model(data, path),
        input=[inp] if isinstance(inp, str) else inp,
        params=neutral.make(values),
        raw=data,
    )


_BY_KEY: dict[str, Parse] = {"messages": parse_chat, "prompt": parse_completion, "input": parse_embedding}


def parse_invocation(body: bytes, path: PathValues | None = None) -> Request:
    """One invocations body: the task is whichever of messages / prompt / input it carries."""
    data = load_object(body)
    present = [k for k in _BY_KEY if k in data]
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
    return _BY_KEY[present[0]](data, path)


def _openai_form(parse: Parse) -> Callable[[bytes, PathValues], Request]:
    """The OpenAI-client paths: same bodies, and `model` (the endpoint name) is required."""

    def parse_form(body: bytes, path: PathValues) -> Request:
        data = load_object(body)
        if not isinstance(data.get("model"), str) or not data["model"]:
            raise InvalidRequest("model: the serving endpoint name is required", param="model")
        return parse(data, None)

    return parse_form


def _path_name(path: PathValues) -> str | None:
    return path.get("name")


def served_model(answer: Answer | None, ctx: RenderContext) -> dict[str, str]:
    """Databricks names the served model answering in `served-model-name` (databricks-sdk's
    query() reads it): the backend's own word for it, else the model its config names."""
    name = (answer.model if answer is not None else None) or ctx.backend_model or ctx.model
    return {"served-model-name": name}


INVOCATIONS = Endpoint(
    parse_invocation, render.render_result, render.stream_renderer, path_model=_path_name, headers=served_model
)
CHAT = Endpoint(_openai_form(parse_chat), render.render_result, render.stream_renderer, headers=served_model)
COMPLETION = Endpoint(
    _openai_form(parse_completion), render.render_result, render.stream_renderer, headers=served_model
)
EMBEDDING = Endpoint(_openai_form(parse_embedding), render.render_result, None, headers=served_model)


async def get_endpoint(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    """The control-plane view of one endpoint, enough for a readiness probe (state.ready)."""
    name = path["name"]
    group.select(name)
    body = {"name": name, "state": {"ready": "READY", "config_update": "NOT_UPDATING"}}
    return Reply(body=jsonutil.dumps(body))


class DatabricksInbound:
    mounts: Sequence[Mount] = (
        Mount("POST", "/serving-endpoints/{name}/invocations", INVOCATIONS),
        Mount("POST", "/serving-endpoints/chat/completions", CHAT),
        Mount("POST", "/serving-endpoints/completions", COMPLETION),
        Mount("POST", "/serving-endpoints/embeddings", EMBEDDING),
        Mount("GET", "/api/2.0/serving-endpoints/{name}", info=get_endpoint),
    )

    def error_reply(self, err: GatewayError) -> Reply:
        status, _ = render.error_status_code(err)
        return Reply(status, jsonutil.dumps(render.error_body(err)))
