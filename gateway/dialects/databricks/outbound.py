"""Talking to a Databricks serving endpoint: `{url}/serving-endpoints/{model}/invocations`.

The workspace's bearer token comes from the backend's `headers:` (e.g. `Authorization: "Bearer
${DATABRICKS_TOKEN}"`). Answers and streams are OpenAI-shaped, so the OpenAI dialect reads them;
what differs is the path, the request body (no `model`, `stream` always explicit because the
documented default is true), the parameters carried, Databricks' error bodies and the health
call, which reads the endpoint's state from the control plane. See docs/dialects/databricks.md.
"""

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from gateway import jsonutil
from gateway.adapters.prompt import ids_text
from gateway.codec.contract import BackendView, Carriage, NoOptions, Outgoing, UpstreamCall
from gateway.codec.wirenames import WireNames
from gateway.dialects.databricks import params as names
from gateway.dialects.databricks.reading import DatabricksStreamParser, error_text
from gateway.dialects.openai import reading as openai
from gateway.neutral.errors import InvalidRequest, Unsupported
from gateway.neutral.params import Fate
from gateway.neutral.types import Answer, Message, Request, Task

_NAMES: dict[Task, WireNames] = {
    Task.CHAT: names.CHAT_OUT,
    Task.COMPLETION: names.COMPLETION_OUT,
    Task.EMBEDDING: names.EMBEDDING_OUT,
}


def message_dict(m: Message) -> dict[str, Any]:
    """A Databricks ChatMessage: no `name`; OpenAI's `developer` role is Databricks' `system`."""
    content: Any = m.content
    if isinstance(content, list) and all(p.get("type") == "text" for p in content):
        content = m.text()
    out: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role}
    if content is not None or not m.tool_calls:
        out["content"] = content
    if m.tool_calls:
        out["tool_calls"] = m.tool_calls
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def tool(t: Any) -> dict[str, Any]:
    """A function tool as Databricks takes it: its description is required (empty when the
    client gave none)."""
    fn = t.get("function") or {}
    if isinstance(fn, dict) and fn.get("description") is None:
        return {**t, "function": {**fn, "description": ""}}
    return dict(t)


# Databricks endpoint names consist of letters, digits, dashes and underscores.
_ENDPOINT_NAME = re.compile(r"[A-Za-z0-9_-]{1,256}")


def endpoint_name(req: Request, backend: BackendView[NoOptions]) -> str:
    if backend.model:
        return backend.model
    name = req.model
    if not name:
        raise Unsupported(
            f"backend {backend.name!r} (databricks) has no `model:` (the serving endpoint name) and the "
            "request names none",
            param="model",
        )
    # The name becomes a path segment: held to Databricks' own rule, so it names an endpoint and
    # nothing else ("." or ".." would walk the URL).
    if not _ENDPOINT_NAME.fullmatch(name):
        raise InvalidRequest(
            f"{name!r} is not a valid serving endpoint name (letters, digits, '-' and '_')",
            param="model",
            code="invalid_value",
        )
    return name


# One wire: a serving endpoint's invocations path takes every task.
WIRE = "databricks"
_CARRIAGE = {
    Task.CHAT: Carriage(names.CHAT_OUT.fates(logprobs=Fate.MAP), wire=WIRE),
    Task.COMPLETION: Carriage(names.COMPLETION_OUT.fates(), wire=WIRE),
    # The client's dialect renders base64 from the floats Databricks returns.
    Task.EMBEDDING: Carriage(names.EMBEDDING_OUT.fates(encoding_format=Fate.EMULATE), wire=WIRE),
}


def _decoded(ids: list[int] | list[list[int]], backend: BackendView[NoOptions]) -> str | list[str]:
    """Token-id prompts as the text an endpoint takes, through the model's tokenizer (the request
    fails with a clear message when none is configured)."""
    if not backend.tokenizer:
        raise Unsupported(
            f"backend {backend.name!r} (databricks) takes text prompts; to send it token ids, set "
            "`tokenizer:` on the backend to the model's tokenizer folder",
            param="prompt",
            code="tokenizer_not_configured",
        )
    if ids and isinstance(ids[0], list):
        return [ids_text(one, backend) for one in ids]
    return ids_text(ids, backend)  # type: ignore[arg-type]


class DatabricksOutbound:
    options_model = NoOptions
    shared_credentials = True
    batch_prompts = True
    forwards_same_wire = True

    def carriage(self, req: Request, backend: BackendView[NoOptions]) -> Carriage:
        return _CARRIAGE[req.task]

    def build(self, out: Outgoing[NoOptions]) -> UpstreamCall:
        req, backend = out.req, out.backend
        path = f"/serving-endpoints/{quote(endpoint_name(req, backend), safe='')}/invocations"
        if out.same_wire and req.raw is not None:
            # Forward what the client sent; the endpoint is in the path, not the body.
            body = {k: v for k, v in req.raw.items() if k != "model"}
            if req.task is not Task.EMBEDDING:
                body["stream"] = req.stream
            return UpstreamCall(path, jsonutil.dumps(body), req.stream, passthrough=True, state=req)
        wire: dict[str, Any]
        if req.task is Task.CHAT:
            wire = {"messages": [message_dict(m) for m in req.messages or ()]}
        elif req.task is Task.COMPLETION:
            wire = {"prompt": req.prompt if req.prompt_ids is None else _decoded(req.prompt_ids, backend)}
        else:
            if req.input and not all(isinstance(x, str) for x in req.input):
                raise Unsupported(
                    f"backend {backend.name!r} (databricks) embeds text only, not token ids", param="input"
                )
            wire = {"input": req.input}
        wire.update(_NAMES[req.task].write(req.params))
        if "tools" in wire:
            wire["tools"] = [tool(t) for t in wire["tools"]]
        if req.task is Task.CHAT and req.params.logprobs:
            wire["logprobs"] = True
        if req.task is not Task.EMBEDDING:
            wire["stream"] = req.stream
        return UpstreamCall(path, jsonutil.dumps(wire), req.stream, state=req)

    def parse_result(self, call: UpstreamCall, body: bytes, headers: Mapping[str, str]) -> Answer:
        answer = openai.parse_body(call.state, body)
        served = headers.get("served-model-name")
        return replace(answer, model=served) if served else answer

    def stream_parser(self, call: UpstreamCall) -> DatabricksStreamParser:
        req: Request = call.state
        return DatabricksStreamParser(req.task is Task.CHAT, call.passthrough)

    def error_message(self, status: int, body: bytes) -> str:
        return error_text(body)

    def health_path(self, backend: BackendView[NoOptions]) -> str:
        return f"/api/2.0/serving-endpoints/{quote(backend.model or '', safe='')}"

    def health_ok(self, body: bytes) -> bool:
        """Ready when the endpoint's state says READY (the control plane answers 200 either way)."""
        try:
            obj = jsonutil.loads(body)
        except jsonutil.JSONDecodeError:
            return False
        state = obj.get("state") if isinstance(obj, dict) else None
        return isinstance(state, dict) and state.get("ready") == "READY"
