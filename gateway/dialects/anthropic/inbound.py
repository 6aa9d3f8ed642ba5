"""Anthropic's Messages API as clients speak it: request parsing into the neutral form, the
paths (messages, token counts, models, the probes Claude Code sends), error bodies.

The key comes in `x-api-key` (the SDKs' and Claude Code's way) or `Authorization: Bearer`.
`anthropic-version` and `anthropic-beta` are accepted whatever they say: a beta a backend lacks
is a feature the answer does without, as the API does. See docs/dialects/anthropic.md.
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from gateway import jsonutil
from gateway.adapters import tokenizer_for
from gateway.adapters.prompt import prompt_text
from gateway.codec.capabilities import BEARER, KeyHeader
from gateway.codec.contract import Asked, Caller, Endpoint, GroupView, Mount, PathValues, Reply
from gateway.codec.errors import stated
from gateway.codec.structured import json_value, with_schema
from gateway.codec.validation import load_object, validate
from gateway.dialects.anthropic import params as names
from gateway.dialects.anthropic import render
from gateway.dialects.anthropic.blocks import to_neutral, tool_choice_to_neutral, tool_to_neutral
from gateway.dialects.anthropic.outbound import WIRE
from gateway.dialects.anthropic.schema import CountTokensRequest, MessagesRequest, plain_messages
from gateway.neutral import params as neutral
from gateway.neutral.errors import GatewayError, InvalidRequest, NotFound, Unsupported
from gateway.neutral.types import Request, Task


def output_format(data: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema the answer is held to (`output_config.format`, or the older top-level
    `output_format`) as a response format."""
    config = data.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else None
    where = "output_config.format"
    if fmt is None:
        fmt, where = data.get("output_format"), "output_format"
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise InvalidRequest(f"{where} must be {{type: json_schema, schema}}", param=where, code="invalid_value")
    return with_schema(json_value(fmt.get("schema"), where + ".schema"))


def read_params(data: dict[str, Any]) -> neutral.Params:
    """The neutral parameters of a validated body (a token count's too, which has fewer)."""
    values = names.MESSAGES_IN.read(data)
    tools = data.get("tools")
    if tools:
        values["tools"] = tuple(tool_to_neutral(t) for t in tools)
    choice = data.get("tool_choice")
    if choice is not None:
        values["tool_choice"] = tool_choice_to_neutral(choice)
        if choice.get("disable_parallel_tool_use"):
            values["parallel_tool_calls"] = False
    user = (data.get("metadata") or {}).get("user_id")
    if isinstance(user, str):
        values["user"] = user
    held = output_format(data)
    if held is not None:
        values["response_format"] = held
    thinking = data.get("thinking")
    if thinking is not None and thinking["type"] != "adaptive":
        # The chat template's switch for the model's reasoning (Qwen3's, DeepSeek's...).
        values["chat_template_kwargs"] = {"enable_thinking": thinking["type"] == "enabled"}
    return neutral.make(values)


def parse_messages(body: bytes, path: PathValues | None = None) -> Request:
    data = load_object(body)
    if not plain_messages(data):
        validate(MessagesRequest, data)
    return Request(
        task=Task.CHAT,
        wire=WIRE,
        model=data["model"],
        messages=to_neutral(data.get("system"), data["messages"]),
        stream=bool(data.get("stream")),
        include_usage=True,
        params=read_params(data),
        raw=data,
    )


MESSAGES = Endpoint(parse_messages, render.render_result, render.stream_renderer)


async def count_tokens(asked: Asked, group: GroupView, caller: Caller) -> Reply:
    """The prompt's tokens as the route's backend would see them: the conversation through the
    model's chat template, counted by its tokenizer (the backend's `tokenizer:` folder)."""
    data = load_object(asked.body)
    m = validate(CountTokensRequest, data)
    route = group.select(m.model)
    backend = route.backend
    if not backend.tokenizer:
        raise Unsupported(
            f"backend {backend.name!r} has no `tokenizer:` to count tokens with; set it to the folder of "
            "the model's tokenizer.json and tokenizer_config.json",
            param="tokenizer",
            code="tokenizer_not_configured",
        )
    req = Request(task=Task.CHAT, wire=WIRE, model=m.model, messages=to_neutral(data.get("system"), data["messages"]))
    req = req.but(params=read_params(data))
    text = prompt_text(req, backend)
    count = tokenizer_for(backend).count_prompt(text)
    return Reply(body=jsonutil.dumps({"input_tokens": count}))


# When the gateway started, in the RFC 3339 form the API gives a model's `created_at`.
_STARTED = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def model_object(model: str) -> dict[str, Any]:
    return {"type": "model", "id": model, "display_name": model, "created_at": _STARTED}


async def list_models(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    ids = group.model_ids()
    body = {
        "data": [model_object(m) for m in ids],
        "has_more": False,
        "first_id": ids[0] if ids else None,
        "last_id": ids[-1] if ids else None,
    }
    return Reply(body=jsonutil.dumps(body))


async def get_model(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    model = path["model"]
    if model not in group.model_ids():
        raise NotFound(f"model: {model}")
    return Reply(body=jsonutil.dumps(model_object(model)))


async def hello(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    """What a client's reachability probe gets (Claude Code sends `HEAD` to its base URL)."""
    return Reply(body=b"{}")


def error_reply(err: GatewayError) -> Reply:
    return Reply(stated(render.ERRORS, err)[0], render.error_body(err))


class AnthropicInbound:
    mounts: Sequence[Mount] = (
        Mount("POST", "/v1/messages", MESSAGES),
        Mount("POST", "/v1/messages/count_tokens", reads=count_tokens),
        Mount("GET", "/v1/models", info=list_models),
        Mount("GET", "/v1/models/{model:.+}", info=get_model),
        Mount("GET", "/", info=hello, auth=False),
        Mount("GET", "/api/hello", info=hello, auth=False),
    )
    key_headers: Sequence[KeyHeader] = (KeyHeader("x-api-key"), BEARER)

    def error_reply(self, err: GatewayError) -> Reply:
        return error_reply(err)
