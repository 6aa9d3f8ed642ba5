"""Talking to a Messages server: POST /v1/messages, with `anthropic-version`.

Anthropic's own API takes its key from the backend's `headers:` (`x-api-key`); vLLM serves the
same path. A client speaking Messages has its body forwarded as it is (only the model rewritten)
and the answer handed back as it came. A Messages body must say `max_tokens`: a request that
does not (an OpenAI client may leave it out) gets the backend's `options.max_tokens`.
See docs/dialects/anthropic.md.
"""

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gateway import jsonutil
from gateway.codec.contract import BackendView, Carriage, Outgoing, UpstreamCall
from gateway.codec.structured import is_any_object, schema_of
from gateway.dialects.anthropic import params as names
from gateway.dialects.anthropic import reading
from gateway.dialects.anthropic.blocks import from_neutral
from gateway.neutral.errors import Unsupported
from gateway.neutral.params import Fate, Params
from gateway.neutral.types import Answer, Request, Task

WIRE = "anthropic.messages"
PATH = "/v1/messages"
VERSION = "2023-06-01"  # the API version whose wire this dialect speaks
HEADERS = {"anthropic-version": VERSION}


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # What a request that names no max_tokens is given (the API requires the field).
    max_tokens: int = Field(4096, ge=1)


_CARRIAGE = Carriage(
    names.MESSAGES.fates(
        **dict.fromkeys(names.SHAPED, Fate.MAP),
        # The API gives one answer per request: n choices are n requests.
        n=Fate.EMULATE,
        do_sample=Fate.MAP,
    ),
    wire=WIRE,
    # Content blocks: text and images.
    parts=frozenset({"text", "image_url"}),
)


def tool_choice(choice: Any, parallel: bool | None) -> dict[str, Any] | None:
    out: dict[str, Any] | None
    if choice is None:
        out = None
    elif isinstance(choice, str):
        out = {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
    else:
        out = {"type": "tool", "name": choice["function"]["name"]}
    if parallel is False:
        out = (out or {"type": "auto"}) | {"disable_parallel_tool_use": True}
    return out


def tool(t: Mapping[str, Any]) -> dict[str, Any]:
    fn = t["function"]
    out: dict[str, Any] = {"name": fn["name"]}
    if fn.get("description") is not None:
        out["description"] = fn["description"]
    out["input_schema"] = fn.get("parameters") or {"type": "object", "properties": {}}
    return out


def output_format(response_format: Mapping[str, Any], backend: str) -> dict[str, Any]:
    """A response format as the API's output format: a JSON schema. The API holds every object
    of it closed (no properties but those named), so "any JSON object" cannot be said."""
    schema = schema_of(response_format)
    if schema is None or is_any_object(response_format):
        raise Unsupported(
            f"backend {backend!r} (anthropic) holds answers to a JSON schema only, not to any JSON "
            "object: send response_format of type json_schema",
            param="response_format",
            code="unsupported_parameter",
        )
    return {"type": "json_schema", "schema": schema}


def request_body(req: Request, model: str | None, default_max: int, backend: str = "") -> dict[str, Any]:
    p: Params = req.params
    system, turns = from_neutral(req.messages or [])
    body: dict[str, Any] = {} if model is None else {"model": model}
    body["messages"] = turns
    if system:
        body["system"] = system
    body.update(names.MESSAGES.write(p.replace(max_tokens=p.max_tokens or default_max)))
    if p.greedy and p.temperature is None:
        body["temperature"] = 0.0
    if p.user is not None:
        body["metadata"] = {"user_id": p.user}
    if p.tools:
        body["tools"] = [tool(t) for t in p.tools]
    choice = tool_choice(p.tool_choice, p.parallel_tool_calls)
    if choice is not None:
        body["tool_choice"] = choice
    if p.response_format is not None:
        body["output_config"] = {"format": output_format(p.response_format, backend)}
    if req.stream:
        body["stream"] = True
    return body


class AnthropicOutbound:
    options_model = Options
    shared_credentials = False
    batch_prompts = False
    forwards_same_wire = True

    def carriage(self, req: Request, backend: BackendView[Options]) -> Carriage:
        return _CARRIAGE

    def build(self, out: Outgoing[Options]) -> UpstreamCall:
        req, backend = out.req, out.backend
        if req.task is not Task.CHAT:
            raise Unsupported(
                f"backend {backend.name!r} (anthropic) serves chat (Messages) only, not {req.task.value}",
                code="unsupported_task",
            )
        model = backend.model or req.model
        if out.same_wire and req.raw is not None:
            body = dict(req.raw)
            if body.get("tools") == []:
                # An empty list asks for nothing (Claude Code sends one when its tools are off),
                # but vLLM then takes tool_choice as auto, which it refuses without a tool parser.
                del body["tools"]
            if model is not None:
                body["model"] = model
            rename = jsonutil.dumps(req.model) if req.model and model and req.model != model else None
            return UpstreamCall(
                PATH, jsonutil.dumps(body), req.stream, headers=HEADERS, passthrough=True, state=req, rename=rename
            )
        body = request_body(req, model, backend.options.max_tokens, backend.name)
        return UpstreamCall(PATH, jsonutil.dumps(body), req.stream, headers=HEADERS, state=req)

    def parse_result(self, call: UpstreamCall, body: bytes, headers: Mapping[str, str]) -> Answer:
        if call.passthrough:
            return reading.passthrough_body(body, call.rename)
        return reading.parse_body(body)

    def stream_parser(self, call: UpstreamCall) -> reading.MessagesStreamParser:
        return reading.MessagesStreamParser(call.passthrough, call.rename)

    def error_message(self, status: int, body: bytes) -> str:
        return reading.error_message(body)

    def health_path(self, backend: BackendView[Options]) -> str:
        return "/v1/models"
