"""Input items into chat messages: the conversation a Responses API request holds, as the neutral
form has it.

The conversation is `instructions` and the leading `developer`/`system` items as the system
turn, then each input item as a chat message: `function_call` items as the assistant's tool
calls, `function_call_output` items as tool results, `reasoning` items as the reasoning of the
assistant turn that follows (kept for chat templates that render it). Items of tools the
provider runs (web searches, ...) mean nothing to another backend and are left out. See
docs/dialects/responses.md.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from gateway import jsonutil
from gateway.dialects.responses import params as names
from gateway.dialects.responses.schema import TRANSLATED
from gateway.neutral.errors import InvalidRequest
from gateway.neutral.types import Message

_SYSTEM = ("system", "developer")


def _part(part: Mapping[str, Any]) -> dict[str, Any] | None:
    """A content part in chat's form (text, image_url, file); None for one that carries nothing
    a chat backend reads."""
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": part["text"]}
    if kind == "refusal":
        return {"type": "text", "text": part["refusal"]}
    if kind == "input_image":
        image: dict[str, Any] = {"url": part["image_url"]}
        if part.get("detail") in ("low", "high"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        return {"type": "file", "file": {k: v for k, v in part.items() if k != "type"}}
    return None


def content_of(content: str | Sequence[Mapping[str, Any]]) -> str | list[dict[str, Any]]:
    """Item content in chat's form: a string as it is, parts as chat parts (text alone: a string)."""
    if isinstance(content, str):
        return content
    parts = [p for p in map(_part, content) if p is not None]
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def reasoning_text(item: Mapping[str, Any]) -> str:
    """A reasoning item's text: its reasoning_text parts, or else its summary."""
    parts = item.get("content") or item.get("summary") or ()
    return "".join(p.get("text") or "" for p in parts if isinstance(p, dict))


def _call(item: Mapping[str, Any]) -> dict[str, Any]:
    ref = names.ToolRef(item["name"], item.get("namespace"))
    if item["type"] == "custom_tool_call":
        arguments = jsonutil.dumps({"input": item["input"]}).decode()
    else:
        arguments = item["arguments"]
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": names.flat_name(ref), "arguments": arguments},
    }


class _Conversation:
    """Chat messages built item by item: an assistant's text and its calls make one message."""

    def __init__(self, system: list[str]) -> None:
        self.messages: list[Message] = []
        self._system = system
        self._started = False
        self._reasoning: str | None = None

    def _open(self) -> None:
        if not self._started:
            self._started = True
            if self._system:
                self.messages.append(Message("system", "\n\n".join(self._system)))

    def add(self, item: Mapping[str, Any]) -> None:
        kind = item.get("type", "message")
        if kind == "reasoning":
            text = reasoning_text(item)
            self._reasoning = text if self._reasoning is None else self._reasoning + text
            return
        if kind not in TRANSLATED:
            return
        if kind == "message" and item["role"] in _SYSTEM:
            content = content_of(item["content"])
            if not self._started:
                self._system.append(Message("system", content).text())
            else:
                self.messages.append(Message("system", content))
            return
        self._open()
        if kind == "message":
            self._message(item["role"], content_of(item["content"]))
        elif kind in ("function_call", "custom_tool_call"):
            self._tool_call(_call(item))
        else:
            output = item["output"]
            self.messages.append(Message("tool", content_of(output), tool_call_id=item["call_id"]))

    def _message(self, role: str, content: str | list[dict[str, Any]]) -> None:
        reasoning, self._reasoning = (self._reasoning, None) if role == "assistant" else (None, self._reasoning)
        self.messages.append(Message(role, content, reasoning_content=reasoning))

    def _tool_call(self, call: dict[str, Any]) -> None:
        last = self.messages[-1] if self.messages else None
        if last is not None and last.role == "assistant" and self._reasoning is None:
            # Parallel calls, or a call after the text of the same turn.
            self.messages[-1] = Message(
                "assistant", last.content, tool_calls=[*(last.tool_calls or ()), call],
                reasoning_content=last.reasoning_content,
            )  # fmt: skip
            return
        reasoning, self._reasoning = self._reasoning, None
        self.messages.append(Message("assistant", None, tool_calls=[call], reasoning_content=reasoning))

    def done(self) -> list[Message]:
        self._open()
        return self.messages


def conversation(instructions: str | None, items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """The chat messages for `instructions` and the input items."""
    conv = _Conversation([instructions] if instructions else [])
    for item in items:
        conv.add(item)
    messages = conv.done()
    if not messages or all(m.role == "system" for m in messages):
        raise InvalidRequest("The request has no input to answer: give `input`", param="input", code="missing_input")
    return messages
