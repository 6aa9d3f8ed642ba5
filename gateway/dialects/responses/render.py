"""Responses API answers as OpenAI's wire has them: the `response` object, and its stream of
events (`event:` lines, `sequence_number`s, each output item added, filled and done, then
`response.completed`, `response.incomplete` or, after a fault, `response.failed`). A stored
response is streamed again (`replay`) by the same writer. See docs/dialects/responses.md.

A streamed text delta is written from a byte template made when its message item opens, so a
token costs one JSON string encode and a few concatenations, as a chat chunk does.
"""

import hashlib
import os
import time
from collections.abc import Mapping
from typing import Any

from gateway import jsonutil
from gateway.codec.contract import RenderContext
from gateway.dialects.responses import stored
from gateway.dialects.responses.params import ToolTable
from gateway.neutral.errors import GatewayError, Kind
from gateway.neutral.types import Answer, Choice, Finish, Request, Result, Usage

_dumps = jsonutil.dumps
CONTENT_TYPE = "text/event-stream"
# A response whose answer was cut short says why (`incomplete_details.reason`).
INCOMPLETE = {Finish.LENGTH: "max_output_tokens", Finish.CONTENT_FILTER: "content_filter"}
# The `code` of a failed response's error, by the kind of fault.
FAILED_CODES = {Kind.RATE_LIMIT: "rate_limit_exceeded", Kind.VALIDATION: "invalid_prompt"}


def usage_object(u: Usage | None) -> dict[str, Any] | None:
    """The Responses API's usage, or None when the counts are not known (never invented)."""
    if u is None or u.prompt_tokens is None or u.completion_tokens is None:
        return None
    extra = u.extra or {}
    cached = (extra.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (extra.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def base_id(ctx: RenderContext) -> str:
    """What a response's id and its items' ids are made of: the request id, unless a client gave
    it (a client may send one id twice), then a digest of it and the moment the request came."""
    rid = ctx.request_id
    if len(rid) == 32 and not rid.strip("0123456789abcdef"):  # nothing but hex digits
        return rid
    return hashlib.blake2b(f"{rid}|{ctx.started!r}|{os.getpid()}".encode(), digest_size=16).hexdigest()


def response_object(
    req: Request,
    ctx: RenderContext,
    status: str,
    output: list[dict[str, Any]],
    usage: Usage | None = None,
    error: dict[str, Any] | None = None,
    incomplete: str | None = None,
) -> dict[str, Any]:
    """The response object, its fields in the API's order, the request's settings echoed."""
    raw = req.raw or {}
    text = _object(raw.get("text"))
    reasoning = _object(raw.get("reasoning"))
    return {
        "id": "resp_" + base_id(ctx),
        "object": "response",
        "created_at": ctx.created,
        "status": status,
        "background": False,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": error,
        "incomplete_details": None if incomplete is None else {"reason": incomplete},
        "instructions": raw.get("instructions"),
        "max_output_tokens": raw.get("max_output_tokens"),
        "max_tool_calls": raw.get("max_tool_calls"),
        "model": ctx.model,
        "output": output,
        "parallel_tool_calls": raw.get("parallel_tool_calls", True),
        "previous_response_id": raw.get("previous_response_id"),
        "prompt_cache_key": raw.get("prompt_cache_key"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "safety_identifier": raw.get("safety_identifier"),
        "service_tier": raw.get("service_tier") or "default",
        "store": stored.wanted(raw),
        "temperature": raw.get("temperature", 1.0),
        "text": {"format": text.get("format") or {"type": "text"}, "verbosity": text.get("verbosity") or "medium"},
        "tool_choice": raw.get("tool_choice") or "auto",
        "tools": raw.get("tools") or [],
        "top_logprobs": raw.get("top_logprobs") or 0,
        "top_p": raw.get("top_p", 1.0),
        "truncation": raw.get("truncation") or "disabled",
        "usage": usage_object(usage),
        "user": raw.get("user"),
        "metadata": raw.get("metadata") or {},
    }


def outcome(finish: Finish | None) -> tuple[str, str | None]:
    reason = INCOMPLETE.get(finish) if finish is not None else None
    return ("incomplete", reason) if reason else ("completed", None)


def logprobs_of(entries: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Neutral per-token log probabilities (chat's form) as the Responses API's."""

    def one(e: Mapping[str, Any]) -> dict[str, Any]:
        token = e.get("token") or ""
        raw = e.get("bytes")
        return {
            "token": token,
            "bytes": raw if isinstance(raw, list) else list(token.encode()),
            "logprob": e.get("logprob", 0.0),
        }

    return [{**one(e), "top_logprobs": [one(t) for t in e.get("top_logprobs") or ()]} for e in entries or ()]


# ---- output items ----------------------------------------------------------------------------


class Ids:
    """Output item ids of one response: a prefix per kind, the request id, a count."""

    __slots__ = ("_n", "_rid")

    def __init__(self, request_id: str) -> None:
        self._rid = request_id
        self._n = 0

    def new(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._rid}{self._n:04x}"


def text_part(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": logprobs or [], "text": text}


def message_item(item_id: str, text: str, status: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    content = [text_part(text, logprobs)]
    return {"id": item_id, "type": "message", "status": status, "content": content, "role": "assistant"}


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": text}]}


def _custom_input(arguments: str) -> str:
    """A freeform tool's text, out of the one-string function it was given to the backend as."""
    try:
        obj = jsonutil.loads(arguments)
    except jsonutil.JSONDecodeError:
        return arguments
    return obj["input"] if isinstance(obj, dict) and isinstance(obj.get("input"), str) else arguments


def call_item(
    tools: ToolTable, ids: Ids, flat: str, call_id: str | None, arguments: str, status: str
) -> dict[str, Any]:
    """A function or freeform tool call as its output item."""
    ref = tools.ref(flat)
    call_id = call_id or ids.new("call")
    if ref.custom:
        item = {"id": ids.new("ctc"), "type": "custom_tool_call", "status": status, "call_id": call_id}
        item.update(input=_custom_input(arguments), name=ref.name)
    else:
        item = {"id": ids.new("fc"), "type": "function_call", "status": status, "arguments": arguments}
        item.update(call_id=call_id, name=ref.name)
    if ref.namespace is not None:
        item["namespace"] = ref.namespace
    return item


def tool_table(req: Request) -> ToolTable:
    tools = (req.raw or {}).get("tools")
    return ToolTable(tools if isinstance(tools, list) else None)


def output_of(choice: Choice, ids: Ids, tools: ToolTable, status: str) -> list[dict[str, Any]]:
    """A whole choice's output items: its reasoning, its text, its tool calls."""
    out: list[dict[str, Any]] = []
    if choice.reasoning:
        out.append(reasoning_item(ids.new("rs"), choice.reasoning))
    if choice.text or not choice.tool_calls:
        out.append(message_item(ids.new("msg"), choice.text, status, logprobs_of(choice.logprobs)))
    for call in choice.tool_calls or ():
        fn = call.get("function") or {}
        out.append(call_item(tools, ids, fn.get("name") or "", call.get("id"), fn.get("arguments") or "", "completed"))
    return out


def whole_response(answer: Answer, req: Request, ctx: RenderContext) -> dict[str, Any]:
    assert isinstance(answer, Result), "the Responses API serves chat requests only"
    choice = answer.choices[0] if answer.choices else Choice()
    status, reason = outcome(choice.finish)
    output = output_of(choice, Ids(base_id(ctx)), tool_table(req), status)
    return response_object(req, ctx, status, output, answer.usage, incomplete=reason)


def render_result(answer: Answer, req: Request, ctx: RenderContext) -> bytes:
    return _dumps(whole_response(answer, req, ctx))


def failure(err: GatewayError) -> dict[str, Any]:
    return {"code": FAILED_CODES.get(err.kind, "server_error"), "message": err.message}


# ---- streams ---------------------------------------------------------------------------------


class Writer:
    """The events of one response's stream, numbered as they are written: the lifecycle events,
    and each output item added, filled and done."""

    __slots__ = ("seq",)

    def __init__(self) -> None:
        self.seq = 0

    def event(self, kind: str, fields: dict[str, Any]) -> bytes:
        data = _dumps({"type": kind, "sequence_number": self.seq, **fields})
        self.seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"

    def lifecycle(self, kind: str, response: dict[str, Any]) -> bytes:
        return self.event(kind, {"response": response})

    def added(self, index: int, item: dict[str, Any], part: dict[str, Any] | None = None) -> bytes:
        out = self.event("response.output_item.added", {"output_index": index, "item": item})
        if part is not None:
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            out += self.event("response.content_part.added", {**where, "part": part})
        return out

    def text_done(self, index: int, item: dict[str, Any]) -> bytes:
        part = item["content"][0]
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        out = self.event("response.output_text.done", {**where, "text": part["text"], "logprobs": part["logprobs"]})
        out += self.event("response.content_part.done", {**where, "part": part})
        return out + self.done(index, item)

    def reasoning_done(self, index: int, item: dict[str, Any]) -> bytes:
        part = item["content"][0]
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        out = self.event("response.reasoning_text.done", {**where, "text": part["text"]})
        out += self.event("response.content_part.done", {**where, "part": part})
        return out + self.done(index, item)

    def call_delta(self, index: int, item: dict[str, Any], delta: str) -> bytes:
        kind = "custom_tool_call_input" if item["type"] == "custom_tool_call" else "function_call_arguments"
        return self.event(f"response.{kind}.delta", {"item_id": item["id"], "output_index": index, "delta": delta})

    def call_done(self, index: int, item: dict[str, Any]) -> bytes:
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "custom_tool_call":
            out = self.event("response.custom_tool_call_input.done", {**where, "input": item["input"]})
        else:
            done = {**where, "name": item["name"], "arguments": item["arguments"]}
            out = self.event("response.function_call_arguments.done", done)
        return out + self.done(index, item)

    def done(self, index: int, item: dict[str, Any]) -> bytes:
        return self.event("response.output_item.done", {"output_index": index, "item": item})


def _opening(item: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """An item as `output_item.added` shows it (nothing in it yet), and its first part's."""
    kind = item["type"]
    if kind == "message":
        return {**item, "status": "in_progress", "content": []}, text_part("")
    if kind == "reasoning":
        return {"id": item["id"], "type": "reasoning", "summary": []}, {"type": "reasoning_text", "text": ""}
    if kind == "function_call":
        return {**item, "status": "in_progress", "arguments": ""}, None
    if kind == "custom_tool_call":
        return {**item, "status": "in_progress", "input": ""}, None
    return item, None


def _item_events(w: Writer, index: int, item: dict[str, Any]) -> bytes:
    """One whole item's events, its content in one delta."""
    opening, part = _opening(item)
    out = w.added(index, opening, part)
    kind = item["type"]
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    if kind == "message":
        text = item["content"][0]["text"] if item.get("content") else ""
        out += w.event("response.output_text.delta", {**where, "delta": text, "logprobs": []})
        return out + w.text_done(index, item)
    if kind == "reasoning":
        text = (item.get("content") or [{"text": ""}])[0]["text"]
        out += w.event("response.reasoning_text.delta", {**where, "delta": text})
        return out + w.reasoning_done(index, item)
    if kind in ("function_call", "custom_tool_call"):
        out += w.call_delta(index, item, item.get("arguments", item.get("input", "")))
        return out + w.call_done(index, item)
    return out + w.done(index, item)


def final_event(status: str) -> str:
    return {"completed": "response.completed", "incomplete": "response.incomplete"}.get(status, "response.failed")


def replay(response: dict[str, Any], starting_after: int | None = None) -> bytes:
    """A kept response's stream, as it would have been streamed whole; with `starting_after`,
    only the events after that sequence number."""
    w = Writer()
    frames = [w.lifecycle("response.created", {**response, "status": "in_progress", "output": [], "usage": None})]
    frames.append(
        w.lifecycle("response.in_progress", {**response, "status": "in_progress", "output": [], "usage": None})
    )
    for index, item in enumerate(response.get("output") or ()):
        frames.append(_item_events(w, index, item))
    frames.append(w.lifecycle(final_event(response.get("status", "completed")), response))
    whole = b"".join(frames)
    if starting_after is None:
        return whole
    # Events are one `event:` and one `data:` line each (JSON holds no raw line end), numbered
    # from 0 in the order they come.
    events = whole.split(b"\n\n")[:-1]
    return b"".join(e + b"\n\n" for e in events[max(starting_after + 1, 0) :])
