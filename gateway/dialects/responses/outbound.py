"""Talking to a server that speaks only the Responses API (`dialect: responses`): a chat request
becomes a create body (the first system turn as `instructions`, each message as an input item,
tool calls and results as `function_call` and `function_call_output` items), a completion's
prompt one user message. Stop strings are the gateway's to enforce, and several choices its
to fan out: the API has neither. Nothing is kept at the server (`store: false`): a client of the
Responses API has its body forwarded as it is, and the gateway keeps its conversations. See
docs/dialects/responses.md.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from gateway import jsonutil
from gateway.adapters.prompt import prompt_text
from gateway.codec.contract import (
    BackendView,
    Caller,
    Carriage,
    GroupView,
    Inbound,
    Mount,
    NoOptions,
    Outgoing,
    PathValues,
    Reply,
    UpstreamCall,
)
from gateway.dialects.responses import params as names
from gateway.dialects.responses import reading
from gateway.dialects.responses.inbound import MOUNTS, WIRE
from gateway.neutral.errors import GatewayError, Unsupported
from gateway.neutral.params import Fate, Params
from gateway.neutral.types import Answer, Message, Request, Task

PATH = "/v1/responses"
_FATES = names.OUT.fates(
    tools=Fate.MAP,
    tool_choice=Fate.MAP,
    response_format=Fate.MAP,
    reasoning_effort=Fate.MAP,
    logprobs=Fate.MAP,
    top_logprobs=Fate.MAP,
    server_tools=Fate.MAP,
    server_tool_choice=Fate.MAP,
    do_sample=Fate.MAP,
    stop=Fate.EMULATE,
    n=Fate.EMULATE,
)
# Input items: text, images and files (gateway.dialects.responses.outbound._part).
CARRIAGE = Carriage(_FATES, wire=WIRE, parts=frozenset({"text", "image_url", "file"}))


def _part(part: Mapping[str, Any], role: str) -> dict[str, Any] | None:
    kind = part.get("type")
    if kind == "text":
        return {"type": "output_text" if role == "assistant" else "input_text", "text": part.get("text", "")}
    if kind == "image_url":
        image = part.get("image_url") or {}
        out: dict[str, Any] = {"type": "input_image", "image_url": image.get("url")}
        out["detail"] = image.get("detail") or "auto"
        return out
    if kind == "file":
        return {"type": "input_file", **dict(part.get("file") or {})}
    return None


def _content(m: Message) -> str | list[dict[str, Any]]:
    if m.content is None or isinstance(m.content, str):
        return m.content or ""
    return [p for p in (_part(part, m.role) for part in m.content) if p is not None]


def input_of(messages: list[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """The `instructions` (a leading system turn) and the input items of chat messages."""
    instructions = None
    items: list[dict[str, Any]] = []
    for k, m in enumerate(messages):
        if m.role in ("system", "developer"):
            if k == 0:
                instructions = m.text()
            else:
                items.append({"type": "message", "role": m.role, "content": _content(m)})
        elif m.role == "tool":
            items.append({"type": "function_call_output", "call_id": m.tool_call_id or "", "output": _content(m)})
        else:
            if m.role != "assistant" or m.content:
                items.append({"type": "message", "role": m.role, "content": _content(m)})
            for call in m.tool_calls or ():
                fn = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id") or "",
                        "name": fn.get("name") or "",
                        "arguments": fn.get("arguments") or "",
                    }
                )
    return instructions, items


def sampling_fields(p: Params) -> dict[str, Any]:
    body = names.OUT.write(p)
    if p.do_sample is False and p.temperature is None:
        body["temperature"] = 0.0  # greedy, the way the API says it
    tools = names.flat_tools(p)
    if tools:
        body["tools"] = tools
    choice = names.flat_tool_choice(p)
    if choice is not None:
        body["tool_choice"] = choice
    if p.response_format is not None:
        body["text"] = {"format": names.text_format(p.response_format)}
    if p.reasoning_effort is not None:
        body["reasoning"] = {"effort": p.reasoning_effort}
    if p.logprobs:
        body["include"] = [names.LOGPROBS]
        if p.top_logprobs:
            body["top_logprobs"] = p.top_logprobs
    return body


def request_body(req: Request, backend: BackendView[NoOptions], model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {} if model is None else {"model": model}
    if req.task is Task.CHAT:
        instructions, items = input_of(req.messages or [])
        if instructions:
            body["instructions"] = instructions
        body["input"] = items
    elif req.task is Task.COMPLETION:
        body["input"] = prompt_text(req, backend)
    else:
        raise Unsupported(
            f"backend {backend.name!r} (responses) cannot make embeddings", param="input", code="unsupported_task"
        )
    body.update(sampling_fields(req.params))
    body["store"] = False
    if req.stream:
        body["stream"] = True
    return body


class ResponsesOutbound:
    options_model = NoOptions
    shared_credentials = False
    batch_prompts = False
    forwards_same_wire = True

    def carriage(self, req: Request, backend: BackendView[NoOptions]) -> Carriage:
        return CARRIAGE

    def build(self, out: Outgoing[NoOptions]) -> UpstreamCall:
        req = out.req
        model = out.backend.model or req.model
        if out.same_wire and req.raw is not None:
            return forwarded(req, model)
        body = request_body(req, out.backend, model)
        return UpstreamCall(PATH, jsonutil.dumps(body), req.stream, state=req)

    def parse_result(self, call: UpstreamCall, body: bytes, headers: Mapping[str, str]) -> Answer:
        if call.passthrough:
            return reading.passthrough_body(body, call.rename, reading.previous_of(call.state))
        return reading.parse_body(body)

    def stream_parser(self, call: UpstreamCall) -> reading.ResponsesStreamParser:
        previous = reading.previous_of(call.state) if call.passthrough else None
        return reading.ResponsesStreamParser(call.passthrough, call.rename, previous)

    def error_message(self, status: int, body: bytes) -> str:
        return reading.error_message(body)

    def health_path(self, backend: BackendView[NoOptions]) -> str:
        return "/v1/models"

    def imitation(self, options: Any) -> Inbound:
        return SERVER


async def _models(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    data = [{"id": name, "object": "model", "owned_by": "gateway"} for name in group.model_ids()]
    return Reply(body=jsonutil.dumps({"object": "list", "data": data}))


class ResponsesServer:
    """What a simulated server of this dialect serves: the Responses API and a model list."""

    mounts: Sequence[Mount] = (*MOUNTS, Mount("GET", "/v1/models", info=_models))

    def error_reply(self, err: GatewayError) -> Reply:
        kind = "invalid_request_error" if err.status < 500 else "server_error"
        error = {"message": err.message, "type": kind, "param": err.param, "code": err.code}
        return Reply(err.status, jsonutil.dumps({"error": error}))


SERVER = ResponsesServer()


def forwarded(req: Request, model: str | None) -> UpstreamCall:
    """A client's create body for a server of the same API, as it came but for the model's name;
    and without `previous_response_id`: the gateway keeps the conversations, and has given the
    body its whole input already."""
    body = dict(req.raw or {})
    body.pop("previous_response_id", None)
    if model is not None:
        body["model"] = model
    rename = jsonutil.dumps(req.model) if req.model and model and req.model != model else None
    return UpstreamCall(PATH, jsonutil.dumps(body), req.stream, passthrough=True, state=req, rename=rename)
