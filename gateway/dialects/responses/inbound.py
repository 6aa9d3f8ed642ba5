"""The Responses API as clients speak it: a create body into the neutral form (a chat request,
its conversation from gateway.dialects.responses.items), an earlier response's conversation
before it (`previous_response_id`), and the paths the API mounts, on every route of the OpenAI
dialect (whose error bodies it shares). See docs/dialects/responses.md.
"""

from collections.abc import Sequence
from typing import Any

from gateway.codec.contract import Caller, Endpoint, Mount, PathValues
from gateway.codec.validation import load_object, validate
from gateway.dialects.responses import params as names
from gateway.dialects.responses import render, state, stored, stream
from gateway.dialects.responses.items import conversation
from gateway.dialects.responses.schema import ResponsesRequest, plain_request
from gateway.neutral import params as neutral
from gateway.neutral.errors import InvalidRequest, NotFound
from gateway.neutral.types import Request, Task

WIRE = state.WIRE


def read_params(data: dict[str, Any]) -> neutral.Params:
    """The neutral parameters of a create body the model takes (its values are as the model
    holds them: it converts nothing)."""
    values = names.IN.read(data)
    raw_tools = data.get("tools")
    functions, server = names.split_tools(raw_tools if isinstance(raw_tools, list) else None)
    if functions:
        values["tools"] = functions
    if server:
        values["server_tools"] = server
    choice, server_choice = names.chat_tool_choice(data.get("tool_choice"), functions)
    # Without a function to call, "auto" and "none" ask for nothing (the tools the provider runs
    # are dropped); "required" still asks for a call no backend can make.
    if choice is not None and (functions or choice == "required"):
        values["tool_choice"] = choice
    if server_choice is not None:
        values["server_tool_choice"] = server_choice
    text, reasoning = data.get("text") or {}, data.get("reasoning") or {}
    if text.get("format") is not None:
        fmt = names.response_format(text["format"])
        if fmt is not None:
            values["response_format"] = fmt
    if reasoning.get("effort") is not None:
        values["reasoning_effort"] = reasoning["effort"]
    if names.LOGPROBS in (data.get("include") or ()):
        values["logprobs"] = True
        if data.get("top_logprobs"):
            values["top_logprobs"] = data["top_logprobs"]
    return neutral.make(values)


def parse(body: bytes, path: PathValues | None = None) -> Request:
    data = load_object(body)
    if not plain_request(data):
        validate(ResponsesRequest, data)
    if data.get("background"):
        raise InvalidRequest(
            "Background responses are not supported by this gateway; leave `background` unset",
            param="background",
            code="unsupported_parameter",
        )
    for field, what in (("conversation", "the Conversations API"), ("prompt", "stored prompts")):
        if data.get(field) is not None:
            raise InvalidRequest(
                f"`{field}` needs {what}, which this gateway does not serve", param=field, code="unsupported_parameter"
            )
    items = stored.input_items(data.get("input"))
    # A request that continues an earlier one gets its conversation when that one is found.
    messages = conversation(data.get("instructions"), items) if data.get("previous_response_id") is None else []
    return Request(
        task=Task.CHAT,
        wire=WIRE,
        model=data["model"],
        messages=messages,
        stream=bool(data.get("stream")),
        include_usage=True,
        params=read_params(data),
        raw=data,
    )


async def prepare(req: Request, caller: Caller) -> Request:
    """A request that continues an earlier response (`previous_response_id`) with the whole
    conversation: the earlier one's input and output, then its own input (its instructions are
    its own: an earlier turn's are not carried over). The body gets the same input, for a
    backend that is given the body as it is."""
    raw = req.raw or {}
    previous = raw.get("previous_response_id")
    if not previous:
        return req
    kept = await stored.load(caller, previous)
    if kept is None:
        raise NotFound(
            f"Previous response with id '{previous}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    items = [*kept.context(), *stored.input_items(raw.get("input"))]
    raw = {**raw, "input": items}
    return req.but(raw=raw, messages=conversation(raw.get("instructions"), items))


CREATE = Endpoint(parse, render.render_result, stream.stream_renderer, prepare=prepare, keep=state.keep)
# The paths, mounted by the OpenAI dialect beside its own.
MOUNTS: Sequence[Mount] = (
    Mount("POST", "/v1/responses", CREATE),
    Mount("POST", "/v1/responses/input_tokens", reads=state.input_tokens),
    Mount("GET", "/v1/responses/{response_id}", reads=state.retrieve),
    Mount("DELETE", "/v1/responses/{response_id}", reads=state.delete),
    Mount("GET", "/v1/responses/{response_id}/input_items", reads=state.input_items_list),
    Mount("POST", "/v1/responses/{response_id}/cancel", reads=state.cancel),
)
