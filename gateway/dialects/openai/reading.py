"""Reading an OpenAI-compatible server: whole answers, error bodies and the SSE chunk stream."""

from typing import Any

from gateway import jsonutil
from gateway.codec.parsing import EventParser
from gateway.neutral.errors import UpstreamClass, UpstreamError
from gateway.neutral.events import Event, FinishEvent, Frame, ReasoningDelta, TextDelta, ToolCallDelta, UsageEvent
from gateway.neutral.finish import parse_finish
from gateway.neutral.types import Answer, Choice, EmbeddingResult, Request, Result, Task, Usage
from gateway.sse import DONE


def usage_from(obj: Any) -> Usage | None:
    if not isinstance(obj, dict):
        return None
    extra = {k: obj[k] for k in ("prompt_tokens_details", "completion_tokens_details") if obj.get(k)}
    return Usage(obj.get("prompt_tokens"), obj.get("completion_tokens"), extra or None)


def chat_logprobs(lp: Any) -> list[dict[str, Any]] | None:
    content = lp.get("content") if isinstance(lp, dict) else None
    return content if isinstance(content, list) else None


def completion_logprobs_to_neutral(lp: Any) -> list[dict[str, Any]] | None:
    if not isinstance(lp, dict) or not isinstance(lp.get("tokens"), list):
        return None
    tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
    return [
        {
            "token": tok,
            "logprob": val,
            "top_logprobs": [{"token": k, "logprob": v} for k, v in (top or {}).items()],
        }
        for tok, val, top in zip(lp["tokens"], lp.get("token_logprobs") or [], tops, strict=False)
    ]


def error_text(obj: Any) -> str:
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        if isinstance(err, str):
            return err
    return str(obj)[:500]


def error_message(body: bytes) -> str:
    try:
        obj = jsonutil.loads(body)
    except jsonutil.JSONDecodeError:
        return body.decode("utf-8", "replace").strip()[:500] or "(empty body)"
    return error_text(obj)


def model_ids(body: bytes) -> list[str]:
    """The ids of an OpenAI-style model list (`{"data": [{"id": ...}]}`)."""
    obj = jsonutil.loads(body)
    return [m["id"] for m in obj.get("data", []) if isinstance(m, dict) and "id" in m]


def parse_body(req: Request, body: bytes) -> Answer:
    obj = jsonutil.loads(body)
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    if obj.get("error"):
        raise UpstreamError(f"backend error: {error_text(obj)}", upstream_class=UpstreamClass.PROTOCOL)
    if req.task is Task.EMBEDDING:
        items = sorted(obj["data"], key=lambda d: d.get("index", 0))
        return EmbeddingResult([d["embedding"] for d in items], usage_from(obj.get("usage")), obj.get("model"))
    choices = []
    for c in obj["choices"]:
        if req.task is Task.CHAT:
            msg = c.get("message") or {}
            choices.append(
                Choice(
                    index=c.get("index", 0),
                    text=msg.get("content") or "",
                    reasoning=msg.get("reasoning_content"),
                    tool_calls=msg.get("tool_calls") or None,
                    finish=parse_finish(c.get("finish_reason")),
                    logprobs=chat_logprobs(c.get("logprobs")),
                )
            )
        else:
            choices.append(
                Choice(
                    index=c.get("index", 0),
                    text=c.get("text") or "",
                    finish=parse_finish(c.get("finish_reason")),
                    logprobs=completion_logprobs_to_neutral(c.get("logprobs")),
                )
            )
    return Result(choices, usage_from(obj.get("usage")), obj.get("model"))


class OpenAIStreamParser(EventParser):
    """Chat or completion chunks from an OpenAI-style SSE stream, to neutral events."""

    __slots__ = ("_chat", "_done", "_finished", "_passthrough")

    def __init__(self, chat: bool, passthrough: bool = False) -> None:
        super().__init__()
        self._chat = chat
        self._passthrough = passthrough
        self._done = False
        self._finished = False

    def on_end(self, out: list[Event]) -> None:
        if not self._done and not self._finished:
            raise UpstreamError("backend stream ended before it was complete", upstream_class=UpstreamClass.MIDSTREAM)

    def on_event(self, data: bytes, out: list[Event]) -> None:
        if data == DONE:
            self._done = True
            return
        obj = jsonutil.loads(data)
        if obj.get("error"):
            raise UpstreamError(f"backend error mid-stream: {error_text(obj)}", upstream_class=UpstreamClass.MIDSTREAM)
        choices = obj.get("choices") or ()
        if self._passthrough:
            out.append(Frame(data, usage_only=not choices and bool(obj.get("usage"))))
        for c in choices:
            i = c.get("index", 0)
            if self._chat:
                delta = c.get("delta") or {}
                text = delta.get("content")
                if text:
                    out.append(TextDelta(text, i, chat_logprobs(c.get("logprobs"))))
                reasoning = delta.get("reasoning_content")
                if reasoning:
                    out.append(ReasoningDelta(reasoning, i))
                for tc in delta.get("tool_calls") or ():
                    fn = tc.get("function") or {}
                    out.append(
                        ToolCallDelta(tc.get("index", 0), tc.get("id"), fn.get("name"), fn.get("arguments") or "", i)
                    )
            else:
                text = c.get("text")
                if text:
                    out.append(TextDelta(text, i, completion_logprobs_to_neutral(c.get("logprobs"))))
            reason = parse_finish(c.get("finish_reason"))
            if reason is not None:
                self._finished = True
                out.append(FinishEvent(reason, i))
        usage = obj.get("usage")
        if usage:
            u = usage_from(usage)
            if u is not None:
                out.append(UsageEvent(u))
