"""OpenAI as clients speak it: request parsing into the neutral form, the paths, error bodies.

See docs/dialects/openai.md.
"""

import time
from collections.abc import Sequence
from typing import Any

from gateway import jsonutil
from gateway.codec.contract import Caller, Endpoint, GroupView, Mount, PathValues, Reply, RouteView
from gateway.codec.structured import from_vllm
from gateway.codec.validation import load_object, validate
from gateway.codec.wirenames import WireNames
from gateway.dialects import responses
from gateway.dialects.openai import params as names
from gateway.dialects.openai import render, stream
from gateway.dialects.openai.outbound import WIRES
from gateway.dialects.openai.schema import ChatCompletionRequest, CompletionRequest, EmbeddingRequest, plain_chat
from gateway.neutral import params as neutral
from gateway.neutral.errors import GatewayError, NotFound
from gateway.neutral.types import Message, Request, Task


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


def read_params(data: dict[str, Any], wire: WireNames, logprobs: Any = None, **more: Any) -> neutral.Params:
    """The neutral parameters of an OpenAI-shaped body: the wire names' values, with `logprobs`
    as chat has it (true or absent) or as completions have it (a count of alternatives), and
    vLLM's ways of asking for JSON read as a response format where the body gives none."""
    values = wire.read(data)
    if "response_format" not in values and ("guided_json" in data or "structured_outputs" in data):
        held = from_vllm(data.get("guided_json"), data.get("structured_outputs"))
        if held is not None:
            values["response_format"] = held
    if logprobs is True:
        values["logprobs"] = True
    elif isinstance(logprobs, int) and not isinstance(logprobs, bool):
        values["logprobs"] = True
        values["top_logprobs"] = logprobs
    values.update(more)
    return neutral.make(values)


def parse_chat(
    body: bytes,
    path: PathValues | None = None,
    *,
    schema: type[ChatCompletionRequest] = ChatCompletionRequest,
    wire: str = WIRES[Task.CHAT],
) -> Request:
    """`schema` and `wire` let OpenAI-flavoured dialects (MindIE) reuse this with their own limits."""
    data = load_object(body)
    if schema is ChatCompletionRequest and plain_chat(data):
        # What the model would hold is the body's own values: strict, it converts nothing.
        model, stream, logprobs, options = (
            data["model"],
            data.get("stream"),
            data.get("logprobs"),
            data.get("stream_options"),
        )
        include_usage = bool(options and options.get("include_usage"))
    else:
        m = validate(schema, data)
        model, stream, logprobs = m.model, m.stream, m.logprobs
        include_usage = bool(m.stream_options and m.stream_options.include_usage)
    return Request(
        task=Task.CHAT,
        wire=wire,
        model=model,
        messages=messages_from(data["messages"]),
        stream=bool(stream),
        include_usage=include_usage,
        params=read_params(data, names.CHAT_IN, logprobs=True if logprobs else None),
        raw=data,
    )


def parse_completion(
    body: bytes,
    path: PathValues | None = None,
    *,
    schema: type[CompletionRequest] = CompletionRequest,
    wire: str = WIRES[Task.COMPLETION],
    default_max_tokens: int | None = 16,  # the API's documented default for completions
) -> Request:
    data = load_object(body)
    m = validate(schema, data)
    more: dict[str, Any] = {}
    if data.get("echo"):
        more["echo"] = True
    if data.get("best_of") is not None:
        more["best_of"] = data["best_of"]
    if m.max_tokens is None and default_max_tokens is not None:
        more["max_tokens"] = default_max_tokens
    params = read_params(data, names.COMPLETION_IN, logprobs=m.logprobs, **more)
    prompt = data["prompt"]
    ids = isinstance(prompt, list) and bool(prompt) and not isinstance(prompt[0], str)
    return Request(
        task=Task.COMPLETION,
        wire=wire,
        model=m.model,
        prompt=None if ids else prompt,
        prompt_ids=prompt if ids else None,
        stream=bool(m.stream),
        include_usage=bool(m.stream_options and m.stream_options.include_usage),
        params=params,
        raw=data,
    )


def parse_embedding(body: bytes, path: PathValues | None = None) -> Request:
    data = load_object(body)
    m = validate(EmbeddingRequest, data)
    more = {"encoding_format": "base64"} if m.encoding_format == "base64" else {}
    inp = data["input"]
    if isinstance(inp, str) or (inp and isinstance(inp[0], int)):
        inp = [inp]
    params = neutral.make({**names.EMBEDDING_IN.read(data), **more})
    return Request(task=Task.EMBEDDING, wire=WIRES[Task.EMBEDDING], model=m.model, input=inp, params=params, raw=data)


RENDER = render.result_renderer(render.OPENAI)
STREAM = stream.stream_renderer(render.OPENAI)
CHAT = Endpoint(parse_chat, RENDER, STREAM)
COMPLETION = Endpoint(parse_completion, RENDER, STREAM)
EMBEDDING = Endpoint(parse_embedding, RENDER, None)


def error_reply(err: GatewayError) -> Reply:
    return Reply(err.status, jsonutil.dumps({"error": render.error_object(err)}))


_STARTED = int(time.time())


def model_object(model: str, owner: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": _STARTED, "owned_by": owner}


async def _backend_models(group: GroupView, route: RouteView) -> list[dict[str, Any]] | None:
    """The backend's own entries for what this route serves, under the names the route exposes;
    None when the backend keeps no such list or cannot give it now."""
    try:
        reply = await group.model_list(route)
        if reply is None:
            return None
        listed = jsonutil.loads(reply.body or b"")["data"] if reply.status == 200 else None
    except (GatewayError, jsonutil.JSONDecodeError, KeyError, TypeError):
        return None
    if not isinstance(listed, list):
        return None
    entries = [e for e in listed if isinstance(e, dict) and isinstance(e.get("id"), str)]
    model = route.backend.model
    if model is None:
        # Clients name the backend's models as they are; the route may offer only some.
        return [e for e in entries if route.models is None or e["id"] in route.models]
    own = next((e for e in entries if e["id"] == model), None)
    return None if own is None else [{**own, "id": name} for name in route.exposed()]


async def _models(group: GroupView) -> list[dict[str, Any]]:
    """Every model the group serves: the backends' own entries where they keep them (vLLM's
    `max_model_len`, `root` and `parent` included), else an entry of the gateway's."""
    out: dict[str, dict[str, Any]] = {}
    for route in group.routes:
        entries = await _backend_models(group, route)
        if entries is None:
            entries = [model_object(name, "gateway") for name in route.exposed()]
        for e in entries:
            out.setdefault(e["id"], e)
    return list(out.values())


async def list_models(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    return Reply(body=jsonutil.dumps({"object": "list", "data": await _models(group)}))


async def get_model(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    model = path["model"]
    for e in await _models(group):
        if e["id"] == model:
            return Reply(body=jsonutil.dumps(e))
    raise NotFound(f"The model {model!r} does not exist", param="model", code="model_not_found")


class OpenAIInbound:
    mounts: Sequence[Mount] = (
        Mount("POST", "/v1/chat/completions", CHAT),
        Mount("POST", "/v1/completions", COMPLETION),
        Mount("POST", "/v1/embeddings", EMBEDDING),
        Mount("GET", "/v1/models", info=list_models),
        # Model ids may hold slashes ("meta-llama/Llama-3.1-8B"), as the SDK sends them.
        Mount("GET", "/v1/models/{model:.+}", info=get_model),
        *responses.MOUNTS,
    )

    def error_reply(self, err: GatewayError) -> Reply:
        return error_reply(err)
