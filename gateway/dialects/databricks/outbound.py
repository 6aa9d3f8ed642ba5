"""Talking to a Databricks serving endpoint: `{url}/serving-endpoints/{model}/invocations`.

The workspace's bearer token comes from the backend's `headers:` (e.g. `Authorization: "Bearer
${DATABRICKS_TOKEN}"`). Answers and streams are OpenAI-shaped, so the OpenAI codec parses them;
what differs is the path, the request body (no `model`, `stream` always explicit because the
documented default is true), the parameters carried, Databricks' error bodies and the health
call, which reads the endpoint's state from the control plane.
"""

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from gateway import jsonutil
from gateway.core.errors import InvalidRequest, Unsupported, UpstreamClass, UpstreamError
from gateway.core.params import Fate
from gateway.core.routing import Backend
from gateway.core.types import EmbeddingResult, Message, Request, Result, Task
from gateway.dialects.base import NoOptions, UpstreamCall
from gateway.dialects.openai.outbound import OpenAIOutbound, OpenAIStreamParser
from gateway.sse import DONE

_SAMPLING = {"top_k": Fate.MAP, "stop": Fate.MAP, "n": Fate.MAP}
_FATES: dict[Task, dict[str, Fate]] = {
    Task.CHAT: {
        **_SAMPLING,
        **{k: Fate.MAP for k in ("tools", "tool_choice", "response_format", "logprobs", "top_logprobs")},
    },
    Task.COMPLETION: {**_SAMPLING, **{k: Fate.MAP for k in ("echo", "suffix", "error_behavior")}},
    # The client's dialect renders base64 from the floats Databricks returns.
    Task.EMBEDDING: {"instruction": Fate.MAP, "encoding_format": Fate.EMULATE},
}
# Neutral params sent under their own name, in this order.
_DIRECT = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "n",
    "tools",
    "tool_choice",
    "response_format",
    "logprobs",
    "top_logprobs",
    "error_behavior",
    "suffix",
    "echo",
    "instruction",
)
_OPENAI = OpenAIOutbound()


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


# Databricks endpoint names consist of letters, digits, dashes and underscores.
_ENDPOINT_NAME = re.compile(r"[A-Za-z0-9_-]{1,256}")


def endpoint_name(req: Request, backend: Backend) -> str:
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


def error_text(body: bytes) -> str:
    """The message in any of the error bodies Databricks is known to send."""
    try:
        obj = jsonutil.loads(body)
    except jsonutil.JSONDecodeError:
        return body.decode("utf-8", "replace").strip()[:500] or "(empty body)"
    if isinstance(obj, dict):
        code, msg = obj.get("error_code"), obj.get("message")
        if code is not None:
            return f"{code}: {msg}" if msg else str(code)
        err = obj.get("error")
        if isinstance(err, str):
            return err
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if msg:
            return str(msg)
    return str(obj)[:500]


class DatabricksStreamParser(OpenAIStreamParser):
    """OpenAI's chunk parser, plus Databricks' own error body arriving as an event."""

    __slots__ = ()

    def _event(self, data: bytes, out: list[Any]) -> None:
        if data != DONE and b'"error_code"' in data:
            obj = jsonutil.loads(data)
            if isinstance(obj, dict) and obj.get("error_code") is not None and not obj.get("choices"):
                raise UpstreamError(
                    f"backend error mid-stream: {error_text(data)}", upstream_class=UpstreamClass.MIDSTREAM
                )
        super()._event(data, out)


class DatabricksOutbound:
    name = "databricks"
    shared_credentials = True
    options_model: type[BaseModel] = NoOptions
    # Completions take a list of prompts in one request (core.batch).
    batch_prompts = True

    def fates(self, backend: Backend, req: Request) -> Mapping[str, Fate]:
        return _FATES[req.task]

    def build(self, req: Request, backend: Backend) -> UpstreamCall:
        path = f"/serving-endpoints/{quote(endpoint_name(req, backend), safe='')}/invocations"
        if req.inbound == "databricks" and req.raw is not None:
            # Same dialect: forward what the client sent; the endpoint is in the path, not the body.
            body = {k: v for k, v in req.raw.items() if k != "model"}
            if req.task is not Task.EMBEDDING:
                body["stream"] = req.stream
            return UpstreamCall(path, jsonutil.dumps(body), req.stream, passthrough=True, state=req)
        p = req.params
        out: dict[str, Any]
        if req.task is Task.CHAT:
            out = {"messages": [message_dict(m) for m in req.messages or ()]}
        elif req.task is Task.COMPLETION:
            if req.prompt_ids is not None:
                raise Unsupported(
                    f"backend {backend.name!r} (databricks) takes text prompts only, not token ids",
                    param="prompt",
                    code="unsupported_parameter",
                )
            out = {"prompt": req.prompt}
        else:
            if req.input and not all(isinstance(x, str) for x in req.input):
                raise Unsupported(
                    f"backend {backend.name!r} (databricks) embeds text only, not token ids", param="input"
                )
            out = {"input": req.input}
        for name in _DIRECT:
            if name in p:
                out[name] = p[name]
        if req.task is not Task.EMBEDDING:
            out["stream"] = req.stream
        return UpstreamCall(path, jsonutil.dumps(out), req.stream, state=req)

    def parse_result(self, call: UpstreamCall, body: bytes) -> Result | EmbeddingResult:
        return _OPENAI.parse_result(call, body)

    def stream_parser(self, call: UpstreamCall) -> DatabricksStreamParser:
        req: Request = call.state
        return DatabricksStreamParser(req.task is Task.CHAT, call.passthrough)

    def error_message(self, status: int, body: bytes) -> str:
        return error_text(body)

    def health_path(self, backend: Backend) -> str:
        return f"/api/2.0/serving-endpoints/{quote(backend.model or '', safe='')}"

    def health_ok(self, body: bytes) -> bool:
        """Ready when the endpoint's state says READY (the control plane answers 200 either way)."""
        try:
            obj = jsonutil.loads(body)
        except jsonutil.JSONDecodeError:
            return False
        state = obj.get("state") if isinstance(obj, dict) else None
        return isinstance(state, dict) and state.get("ready") == "READY"

    def models(self, body: bytes) -> list[str]:
        obj = jsonutil.loads(body)
        if not isinstance(obj, dict):
            return []
        if isinstance(obj.get("endpoints"), list):
            return [e["name"] for e in obj["endpoints"] if isinstance(e, dict) and "name" in e]
        return [obj["name"]] if isinstance(obj.get("name"), str) else []
