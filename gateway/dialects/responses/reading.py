"""Reading a server of the Responses API: whole response objects, its event stream and its error
bodies, into the neutral form; and, for a client of the same API, its answer handed over as it
came, read only for what the metrics need (tokens as they come, usage, how it ended).
"""

import re
from typing import Any

from gateway import jsonutil
from gateway.codec.errors import error_message_in, message_of
from gateway.codec.learning import ALWAYS
from gateway.codec.parsing import EventParser, Quiet, TokenEvents
from gateway.codec.renaming import renamed
from gateway.codec.textchunks import TextChunks
from gateway.dialects.responses.params import ToolRef, flat_name
from gateway.neutral.errors import UpstreamClass, UpstreamError
from gateway.neutral.events import Event, FinishEvent, Frame, ReasoningDelta, TextDelta, ToolCallDelta, UsageEvent
from gateway.neutral.types import Choice, Finish, Request, Result, Usage
from gateway.sse import encode_data

# A Responses stream's text deltas, which a pass-through relays undecoded.
_TEXT_DELTAS = TokenEvents(b"response.output_text.delta")

# How an incomplete response says why it stopped.
_INCOMPLETE = {"max_output_tokens": Finish.LENGTH, "content_filter": Finish.CONTENT_FILTER}
# What a text delta changes from one to the next besides its text.
_VARYING = {"sequence_number": ALWAYS, "obfuscation": ALWAYS}
# What a pass-through stream reports of an event that carries generated text, undecoded.
A_TOKEN = TextDelta("")
# The events that carry generated text.
_TOKEN_KINDS = frozenset(
    (
        b"response.output_text.delta",
        b"response.reasoning_text.delta",
        b"response.reasoning_summary_text.delta",
        b"response.function_call_arguments.delta",
        b"response.custom_tool_call_input.delta",
    )
)
# An event that ends the stream.
_FINAL_KINDS = frozenset((b"response.completed", b"response.incomplete", b"response.failed", b"error"))
# The kinds a pass-through looks for, wherever an event names them.
_KINDS = re.compile(b'"type":"(' + b"|".join(map(re.escape, sorted(_TOKEN_KINDS | _FINAL_KINDS))) + b')"')
# What a pass-through reads the full way (the rest goes out in runs, undecoded): the events that
# carry text or end the stream; and, when it renames the model or names the previous response
# in it, those that hold the response.
_RESPONSE = b'"response":'
_QUIET = Quiet(_KINDS)
_QUIET_BUT_RESPONSE = Quiet(_KINDS, (_RESPONSE,))


def usage_from(obj: Any) -> Usage | None:
    if not isinstance(obj, dict):
        return None
    extra: dict[str, Any] = {}
    cached = (obj.get("input_tokens_details") or {}).get("cached_tokens")
    if cached:
        extra["prompt_tokens_details"] = {"cached_tokens": cached}
    reasoning = (obj.get("output_tokens_details") or {}).get("reasoning_tokens")
    if reasoning:
        extra["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return Usage(obj.get("input_tokens"), obj.get("output_tokens"), extra or None)


error_text = error_message_in


def error_message(body: bytes) -> str:
    return message_of(body, error_text)


def _failed(response: dict[str, Any], midstream: bool) -> UpstreamError:
    where = UpstreamClass.MIDSTREAM if midstream else UpstreamClass.PROTOCOL
    return UpstreamError(f"backend error: {error_text(response.get('error') or response)}", upstream_class=where)


def finish_of(response: dict[str, Any], calls: bool) -> Finish:
    if response.get("status") == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason")
        return _INCOMPLETE.get(reason, Finish.UNKNOWN) if isinstance(reason, str) else Finish.UNKNOWN
    return Finish.TOOL_CALLS if calls else Finish.EOS


def _call_name(item: dict[str, Any]) -> str:
    return flat_name(ToolRef(item.get("name") or "", item.get("namespace")))


def _chat_call(item: dict[str, Any]) -> dict[str, Any]:
    """A function or freeform tool call item as chat's tool call (a freeform one's text as the
    one string its function takes)."""
    if item["type"] == "custom_tool_call":
        arguments = jsonutil.dumps({"input": item.get("input") or ""}).decode()
    else:
        arguments = item.get("arguments") or ""
    return {
        "id": item.get("call_id"),
        "type": "function",
        "function": {"name": _call_name(item), "arguments": arguments},
    }


def chat_logprobs(entries: Any) -> list[dict[str, Any]] | None:
    """The Responses API's per-token log probabilities in the neutral (chat) form."""
    if not isinstance(entries, list) or not entries:
        return None
    return [
        {
            "token": e.get("token"),
            "logprob": e.get("logprob"),
            "bytes": e.get("bytes"),
            "top_logprobs": [dict(t) for t in e.get("top_logprobs") or ()],
        }
        for e in entries
        if isinstance(e, dict)
    ]


def parse_body(body: bytes) -> Result:
    obj = jsonutil.loads(body)
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    if obj.get("status") == "failed" or (obj.get("error") and "output" not in obj):
        raise _failed(obj, midstream=False)
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    logprobs: list[dict[str, Any]] = []
    for item in obj["output"]:
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or ():
                texts.append(part.get("text") or part.get("refusal") or "")
                logprobs += chat_logprobs(part.get("logprobs")) or []
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or ()
            reasoning += [p.get("text") or "" for p in parts]
        elif kind in ("function_call", "custom_tool_call"):
            calls.append(_chat_call(item))
    choice = Choice(
        text="".join(texts),
        reasoning="".join(reasoning) if reasoning else None,
        tool_calls=calls or None,
        finish=finish_of(obj, bool(calls)),
        logprobs=logprobs or None,
    )
    return Result([choice], usage_from(obj.get("usage")), obj.get("model"))


def _response_of(obj: Any) -> Any:
    """The response object of a decoded answer or event (an event holds it as `response`)."""
    return obj.get("response", obj) if isinstance(obj, dict) else None


def _named_once(data: bytes, response: Any) -> bool:
    """Whether the one `"model"` key written in `data` is the response's own string field: with
    no escape anywhere, the response's key is written as it reads, so when it is the only one,
    the first field the rename finds is the response's."""
    return (
        isinstance(response, dict)
        and isinstance(response.get("model"), str)
        and data.count(b'"model"') == 1
        and (92 not in data or data.find(b"\\u") < 0)  # a backslash (found by memchr), an escape
    )


def _renamed_anew(data: bytes, rename: bytes, obj: Any) -> bytes | None:
    """A response object (or an event holding one), `obj` decoded, with its model named as the
    client named it, when that cannot be done in place: None when renaming the first `model`
    field in the bytes is right (the API's own order puts the response's before any other);
    the object written anew when another comes first (a `model` key in, say, the client's
    metadata, left as it was); `data` itself when it holds no response to rename."""
    response = _response_of(obj)
    if not isinstance(response, dict):
        return data
    if _named_once(data, response):
        return None
    named = {**response, "model": jsonutil.loads(rename)}
    whole = {**obj, "response": named} if response is not obj else named
    return None if jsonutil.loads(renamed(data, "model", rename)) == whole else jsonutil.dumps(whole)


def renamed_response(data: bytes, rename: bytes, obj: Any = None) -> bytes:
    """A response object (or an event holding one; `obj` is it decoded, when the caller has it)
    with its model named as the client named it, in place where that is right."""
    anew = _renamed_anew(data, rename, jsonutil.loads(data) if obj is None else obj)
    return renamed(data, "model", rename) if anew is None else anew


_PREVIOUS = re.compile(rb'"previous_response_id"(\s*:\s*)null')


def previous_of(req: Request | None) -> bytes | None:
    """The `previous_response_id` a forwarded request named (JSON bytes): the gateway gave the
    backend the conversation instead, and the backend's answer is to name it as OpenAI's does."""
    previous = (req.raw or {}).get("previous_response_id") if req is not None else None
    return jsonutil.dumps(previous) if isinstance(previous, str) else None


def with_previous(data: bytes, previous: bytes | None) -> bytes:
    """A response (or an event holding one) naming the previous response its client named."""
    if previous is None:
        return data
    return _PREVIOUS.sub(lambda m: b'"previous_response_id"' + m.group(1) + previous, data, count=1)


def passthrough_body(body: bytes, rename: bytes | None, previous: bytes | None = None) -> Result:
    """A response for a client of the same API, as it came: its usage and how it ended read."""
    obj = jsonutil.loads(body)
    if not isinstance(obj, dict) or not isinstance(obj.get("output"), list):
        if isinstance(obj, dict) and obj.get("error"):
            raise _failed(obj, midstream=False)
        raise ValueError("no output")
    calls = any(isinstance(i, dict) and i.get("type") == "function_call" for i in obj["output"])
    out = with_previous(body if rename is None else renamed_response(body, rename, obj), previous)
    return Result([Choice(finish=finish_of(obj, calls))], usage_from(obj.get("usage")), obj.get("model"), out)


class ResponsesStreamParser(EventParser):
    """A Responses API event stream into neutral events; on a pass-through, each event as a
    frame of its own (its `event:` line kept) beside what the metrics read of it."""

    __slots__ = ("_calls", "_custom", "_done", "_passthrough", "_previous", "_rename")

    def __init__(self, passthrough: bool = False, rename: bytes | None = None, previous: bytes | None = None) -> None:
        # Translated, the text deltas are read from their template: they differ in their text,
        # their sequence number and (the public API's) padding.
        chunks = None if passthrough else TextChunks("delta", _VARYING, empty=True)
        quiet = _QUIET if rename is None and previous is None else _QUIET_BUT_RESPONSE
        super().__init__(chunks, relays=passthrough, quiet=quiet)
        self._passthrough = passthrough
        self._rename = rename
        self._previous = previous
        self._done = False
        self._calls: dict[str, int] = {}  # item id -> call index
        self._custom: set[str] = set()

    def feed(self, data: bytes) -> list[Event]:
        if self._passthrough:
            # A pass-through's text deltas (nearly all of a stream) go out undecoded.
            data = self.taken_back(data)
            run = self.relay_run(data, _TEXT_DELTAS)
            if run is not None:
                return run
        return super().feed(data)

    def _pass(self, data: bytes, out: list[Event]) -> None:
        """An event of a pass-through: as it came (its lines, the model renamed in what holds
        the response), with what the metrics read of it."""
        # The kinds it names that count here, found in one pass over the payload (the closing
        # events hold the whole answer).
        kinds = set(_KINDS.findall(data))
        if kinds & _TOKEN_KINDS:
            out.append(Frame(self.relayed(data, "model", None)))
            out.append(A_TOKEN)
            return
        final = bool(kinds & _FINAL_KINDS)
        block = self.relayed(data, "model", None)
        obj: Any = None
        holds_response = data.find(_RESPONSE) >= 0
        if self._rename is not None and holds_response:
            obj = jsonutil.loads(data)
            anew = _renamed_anew(data, self._rename, obj)
            if anew is None:
                block = self.relayed(data, "model", self._rename)  # the name changed in place
            elif anew is not data:  # the event written anew: framed as the API frames it
                kind = str(jsonutil.loads(anew).get("type", ""))
                block = b"event: " + kind.encode() + b"\n" + encode_data(anew)
        if self._previous is not None and holds_response:
            block = with_previous(block, self._previous)
        out.append(Frame(block, final=final))
        if final:
            self._done = True
            if obj is None:
                obj = jsonutil.loads(data)
            response = obj.get("response") if isinstance(obj, dict) else None
            if isinstance(response, dict):
                out.append(FinishEvent(self._ended(response)))
                usage = usage_from(response.get("usage"))
                if usage is not None:
                    out.append(UsageEvent(usage))
            else:
                out.append(FinishEvent(Finish.ERROR))

    def _ended(self, response: dict[str, Any]) -> Finish:
        if response.get("status") == "failed":
            return Finish.ERROR
        calls = any(isinstance(i, dict) and i.get("type") == "function_call" for i in response.get("output") or ())
        return finish_of(response, calls)

    def on_end(self, out: list[Event]) -> None:
        if not self._done:
            raise UpstreamError("backend stream ended before it was complete", upstream_class=UpstreamClass.MIDSTREAM)

    def on_event(self, data: bytes, out: list[Event]) -> None:
        if self._passthrough:
            self._pass(data, out)
            return
        obj = jsonutil.loads(data)
        kind = obj.get("type")
        if kind == "response.output_text.delta":
            logprobs = chat_logprobs(obj.get("logprobs"))
            out.append(TextDelta(obj.get("delta") or "", 0, logprobs))
            if logprobs is None and type(obj.get("delta")) is str:
                self.teach(data, 0, obj["delta"])
        elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            out.append(ReasoningDelta(obj.get("delta") or ""))
        elif kind == "response.output_item.added":
            self._call_added(obj.get("item") or {}, out)
        elif kind in ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta"):
            at = self._calls.get(obj.get("item_id") or "")
            if at is not None:
                delta = obj.get("delta") or ""
                if kind == "response.custom_tool_call_input.delta":
                    delta = jsonutil.dumps(delta)[1:-1].decode()  # inside the JSON string opened
                out.append(ToolCallDelta(at, arguments=delta))
        elif kind == "response.output_item.done":
            item = obj.get("item") or {}
            if item.get("id") in self._custom:
                out.append(ToolCallDelta(self._calls[item["id"]], arguments='"}'))
        elif kind in ("response.completed", "response.incomplete"):
            self._done = True
            response = obj.get("response") or {}
            out.append(FinishEvent(finish_of(response, bool(self._calls))))
            usage = usage_from(response.get("usage"))
            if usage is not None:
                out.append(UsageEvent(usage))
        elif kind == "response.failed":
            raise _failed(obj.get("response") or {}, midstream=True)
        elif kind == "error":
            raise UpstreamError(f"backend error mid-stream: {error_text(obj)}", upstream_class=UpstreamClass.MIDSTREAM)

    def _call_added(self, item: dict[str, Any], out: list[Event]) -> None:
        kind = item.get("type")
        if kind not in ("function_call", "custom_tool_call"):
            return
        at = len(self._calls)
        self._calls[item.get("id") or str(at)] = at
        opening = ""
        if kind == "custom_tool_call":
            self._custom.add(item.get("id") or "")
            opening = '{"input":"'
        out.append(ToolCallDelta(at, item.get("call_id"), _call_name(item), opening))
