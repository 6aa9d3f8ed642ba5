"""Anthropic's content blocks and the neutral messages, both ways.

The neutral conversation is OpenAI-shaped: a system message, user messages with text and
`image_url` parts, assistant messages with `tool_calls` (arguments as JSON text) and
`reasoning_content`, and one `tool` message per tool result. Anthropic keeps the system prompt
apart, puts tool results as blocks in a user turn and tool calls as `tool_use` blocks (input as
an object) in an assistant turn. Tool call ids cross as they are, but an id given to an
Anthropic client starts with `toolu_` as the API's do (docs/dialects/anthropic.md).
"""

import re
from typing import Any

from gateway import jsonutil
from gateway.neutral.types import Message

TOOL_ID = "toolu_"
_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


def texts(blocks: list[dict[str, Any]]) -> str:
    """The text blocks of a list, one paragraph each (as Message.text() reads parts)."""
    return "\n".join(b["text"] for b in blocks if b.get("type") == "text")


def system_text(system: str | list[dict[str, Any]] | None) -> str | None:
    if system is None:
        return None
    return system if isinstance(system, str) else texts(system)


# ---- Anthropic to neutral --------------------------------------------------------------------


def image_part(source: dict[str, Any]) -> dict[str, Any]:
    """An image block's source as an OpenAI `image_url` part (base64 as a data URL)."""
    url = f"data:{source['media_type']};base64,{source['data']}" if source["type"] == "base64" else source["url"]
    return {"type": "image_url", "image_url": {"url": url}}


def _parts(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Text and image blocks as OpenAI content parts (cache_control and citations left out)."""
    out: list[dict[str, Any]] = []
    for b in blocks:
        if b["type"] == "text":
            out.append({"type": "text", "text": b["text"]})
        elif b["type"] == "image":
            out.append(image_part(b["source"]))
    return out


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Parts that are all text read as one string, which every backend takes."""
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _tool_result(block: dict[str, Any]) -> Message:
    content = block.get("content")
    value: str | list[dict[str, Any]] = (
        "" if content is None else content if isinstance(content, str) else _content(_parts(content))
    )
    if block.get("is_error") and isinstance(value, str):
        # The neutral tool message has no error flag: the model reads it from the text.
        value = f"Error: {value}" if value else "Error"
    return Message(role="tool", content=value, tool_call_id=block["tool_use_id"])


def _assistant(blocks: list[dict[str, Any]]) -> Message:
    text = texts(blocks)
    reasoning = "".join(b["thinking"] for b in blocks if b["type"] == "thinking")
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": jsonutil.dumps(b["input"]).decode()},
        }
        for b in blocks
        if b["type"] == "tool_use"
    ]
    return Message(
        role="assistant",
        content=text if text or not calls else None,
        tool_calls=calls or None,
        reasoning_content=reasoning or None,
    )


def to_neutral(system: str | list[dict[str, Any]] | None, messages: list[dict[str, Any]]) -> list[Message]:
    """A validated request's system prompt and turns as neutral messages. System turns among
    the messages (Claude Code sends some) join the system prompt: chat templates take one system
    message, first. A user turn's tool results come first, each a tool message (the turn's other
    blocks follow as a user message), so that they follow the assistant's tool calls as the
    OpenAI form wants them."""
    heads = [system_text(system) or ""]
    out: list[Message] = []
    for m in messages:
        role, content = m["role"], m["content"]
        if role == "system":
            heads.append(content if isinstance(content, str) else texts(content))
        elif isinstance(content, str):
            out.append(Message(role=role, content=content))
        elif role == "assistant":
            out.append(_assistant(content))
        else:
            out += [_tool_result(b) for b in content if b["type"] == "tool_result"]
            parts = _parts(content)
            if parts:
                out.append(Message(role="user", content=_content(parts)))
    head = "\n".join(h for h in heads if h)
    return [Message(role="system", content=head), *out] if head else out


def tool_to_neutral(tool: dict[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    function["parameters"] = tool["input_schema"]
    return {"type": "function", "function": function}


def tool_choice_to_neutral(choice: dict[str, Any]) -> str | dict[str, Any]:
    kind = choice["type"]
    if kind == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return {"auto": "auto", "any": "required", "none": "none"}[kind]


# ---- neutral to Anthropic --------------------------------------------------------------------


def tool_input(arguments: str | None) -> dict[str, Any]:
    """A tool call's JSON arguments as the object Anthropic's `input` is (an object even when
    the model wrote something else: what it wrote is then kept under `arguments`)."""
    if not arguments:
        return {}
    try:
        value = jsonutil.loads(arguments)
    except jsonutil.JSONDecodeError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def tool_id(call_id: str | None, fallback: str) -> str:
    """A tool call's id as an Anthropic client gets it."""
    if not call_id:
        return TOOL_ID + fallback
    return call_id if call_id.startswith(TOOL_ID) else TOOL_ID + call_id


def tool_use(call: dict[str, Any], fallback: str) -> dict[str, Any]:
    fn = call.get("function") or {}
    return {
        "type": "tool_use",
        "id": tool_id(call.get("id"), fallback),
        "name": fn.get("name") or "",
        "input": tool_input(fn.get("arguments")),
    }


def _image_block(url: str) -> dict[str, Any]:
    m = _DATA_URL.fullmatch(url)
    if m is not None:
        return {"type": "image", "source": {"type": "base64", "media_type": m.group(1), "data": m.group(2)}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def content_blocks(content: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Neutral content as Anthropic blocks: text and images (other parts have no block)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out: list[dict[str, Any]] = []
    for p in content:
        if p.get("type") == "text" and p.get("text"):
            out.append({"type": "text", "text": p["text"]})
        elif p.get("type") == "image_url":
            image = p.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if isinstance(url, str):
                out.append(_image_block(url))
    return out


def _turn(m: Message) -> tuple[str, list[dict[str, Any]]]:
    if m.role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id or ""}
        blocks = content_blocks(m.content)
        if blocks:
            block["content"] = blocks
        return "user", [block]
    if m.role == "assistant":
        blocks = content_blocks(m.content)
        blocks += [tool_use(c, str(k)) | {"id": c.get("id") or f"call_{k}"} for k, c in enumerate(m.tool_calls or ())]
        return "assistant", blocks
    return "user", content_blocks(m.content)


def from_neutral(messages: list[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """Neutral messages as Anthropic's `system` and turns: system and developer messages make
    the system prompt (wherever they stood); a tool message is a tool result in a user turn;
    turns of one role in a row are one turn, as the API wants them to alternate."""
    system = [m.text() for m in messages if m.role in ("system", "developer")]
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.role in ("system", "developer"):
            continue
        role, blocks = _turn(m)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    return ("\n".join(system) if system else None), turns
