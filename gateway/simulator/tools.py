"""What the fake model does with tools and structured output (docs/tools.md, "The simulator").

It calls a tool when the request forces a call (tool_choice required or a named function), or
when the last thing said is the user's and names a tool: its name, or a word of its name of four
letters or more ("weather" names get_weather). After a tool's result it answers in text, saying
what the tool said. The arguments are made from the tool's parameter schema: each required
parameter (or the first, when none is required) gets a value of its type, strings the last word
of the user's message.

A server that carries only text sees the request's tools in its prompt, where the chat template
wrote them: the fake model finds them there (JSON objects `{"type": "function", "function": ...}`,
as most templates write them) and looks at what follows them; a call already in that text is a
call made, and what follows it is the tool's result. It writes its call in the format of the
backend's `tool_parser:`.

An answer held to a JSON schema (a response format, a TGI grammar, guided decoding) is the
schema's smallest instance, which is how a forced call comes back from a constrained server.
"""

import json
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.adapters.toolcalls import get_parser
from gateway.codec.structured import schema_of
from gateway.neutral.types import Request

_TOOL_START = re.compile(r'\{\s*"type"\s*:\s*"function"')
_MARKUP = re.compile(r"<\|[^|]*\|>|<[^<>\n]*>|\[[A-Z_]+\]")
_ROLES = frozenset({"system", "user", "assistant", "tool", "ipython"})
_WORD = re.compile(r"[A-Za-z0-9]+")


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = tool.get("function", tool)
    return fn if isinstance(fn, Mapping) else {}


def named(tools: Sequence[Mapping[str, Any]], text: str) -> Mapping[str, Any] | None:
    """The first tool the text names: by its name, or a word of its name of four letters or more."""
    words = {w.lower() for w in _WORD.findall(text)}
    lowered = text.lower()
    for tool in tools:
        name = str(_function(tool).get("name") or "")
        parts = [p.lower() for p in re.split(r"[_\-.]", name) if len(p) >= 4]
        if name and (name.lower() in lowered or any(p in words for p in parts)):
            return tool
    return None


def last_word(text: str) -> str:
    words = [w.strip(string.punctuation) for w in text.split()]
    words = [w for w in words if w]
    return words[-1] if words else "something"


def instance(schema: Any, word: str, defs: Mapping[str, Any] | None = None, depth: int = 0) -> Any:
    """The smallest value `schema` takes (strings are `word`)."""
    if not isinstance(schema, Mapping) or depth > 16:
        return word
    defs = schema.get("$defs", defs) or {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return instance(defs.get(ref.rsplit("/", 1)[1]), word, defs, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return instance(schema[key][0], word, defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        given = schema.get("properties")
        props: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        required = [k for k in schema.get("required") or () if isinstance(k, str)]
        keys = required or list(props)[:1]
        return {k: instance(props.get(k), word, defs, depth + 1) for k in keys}
    if kind == "array":
        count = max(int(schema.get("minItems") or 0), 1)
        return [instance(schema.get("items"), word, defs, depth + 1) for _ in range(count)]
    if kind == "integer":
        return max(int(schema.get("minimum") or 1), 1)
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return word


def arguments(tool: Mapping[str, Any], word: str) -> dict[str, Any]:
    params = _function(tool).get("parameters")
    value = instance(params, word) if isinstance(params, Mapping) and params else {}
    return value if isinstance(value, dict) else {}


def call(tool: Mapping[str, Any], word: str, call_id: str) -> dict[str, Any]:
    fn = _function(tool)
    args = json.dumps(arguments(tool, word), ensure_ascii=False, separators=(",", ":"))
    return {"id": call_id, "type": "function", "function": {"name": fn.get("name"), "arguments": args}}


def held_answer(req: Request, word: str) -> str | None:
    """The answer to a request held to a JSON schema; None when it is not."""
    fmt = req.params.response_format
    schema = schema_of(fmt) if fmt is not None else None
    if schema is None:
        return None
    return json.dumps(instance(schema, word), ensure_ascii=False)


def chosen(req: Request, last_user: str) -> Mapping[str, Any] | None:
    """The tool a request with structured tools calls, if any."""
    tools = req.params.tools or ()
    choice = req.params.tool_choice or "auto"
    if not tools or choice == "none":
        return None
    if isinstance(choice, Mapping):
        name = _function(choice).get("name")
        return next((t for t in tools if _function(t).get("name") == name), None)
    if choice == "required":
        return named(tools, last_user) or tools[0]
    messages = req.messages or ()
    if not messages or messages[-1].role != "user":
        return None  # after a tool result, answer in text
    return named(tools, last_user)


def tools_in(prompt: str) -> tuple[list[dict[str, Any]], int]:
    """The tools a prompt defines as JSON objects, and where the last definition ends."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    end = 0
    for m in _TOOL_START.finditer(prompt):
        if m.start() < end:
            continue
        try:
            value, at = decoder.raw_decode(prompt, m.start())
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(_function(value).get("name"), str):
            found.append(value)
            end = at
    return found, end


def said(text: str) -> str:
    """The last line of plain text in a stretch of prompt (markup and role names left out)."""
    lines = [line.strip() for line in _MARKUP.sub("\n", text).splitlines()]
    kept = [line for line in lines if line and line.lower().rstrip(":") not in _ROLES]
    return kept[-1] if kept else ""


def text_call(prompt: str, parser_name: str) -> tuple[str | None, str | None]:
    """For a prompt made by a chat template: the call the model writes (in the parser's format),
    or else what the tool it called said (when the prompt shows a call); (None, None) when the
    prompt defines no tools."""
    tools, end = tools_in(prompt)
    if not tools:
        return None, None
    rest = prompt[end:]
    parser = get_parser(parser_name)
    made = parser.parse(rest, tools).calls
    if made:
        after = rest[rest.rfind(made[-1].name) :]
        return None, said(after) or "nothing"
    # Only what the user said last names a tool: an agent's long instructions name them all.
    last = said(rest)
    tool = named(tools, last)
    if tool is None:
        return None, None
    return parser.render_call(str(_function(tool).get("name")), arguments(tool, last_word(last))), None
