"""The Responses API's names for the neutral parameters, both ways, and the fields whose form
differs from chat's: tools are flat (`{"type": "function", "name", ...}`), tool choice names its
function flat, structured output is `text.format`, reasoning effort is `reasoning.effort`, log
probabilities are asked for with `include`. See docs/dialects/responses.md.

Tools are given to a chat backend as chat function tools. A freeform (`custom`) tool becomes a
function taking one string, `input`; a tool of a `namespace` a function named
`<namespace>__<name>`. A `ToolTable` reads the model's calls back into the tools they name.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.codec.fields import reading, writing
from gateway.dialects.responses.schema import RESPONSES, ResponsesRequest
from gateway.neutral.errors import InvalidRequest
from gateway.neutral.params import Params
from gateway.records import record

# Plain fields, both ways (`user` is also read from `safety_identifier`, its newer name).
IN = reading(ResponsesRequest)
OUT = writing(ResponsesRequest, RESPONSES)
LOGPROBS = "message.output_text.logprobs"
NAMESPACE_MARK = "__"
_CUSTOM_INPUT = "input"


@record
class ToolRef:
    """What a chat function of the backend stands for: a function or freeform tool, perhaps in
    a namespace."""

    name: str
    namespace: str | None = None
    custom: bool = False


class ToolTable:
    """The client's function and freeform tools, by the name the backend knows them by."""

    __slots__ = ("_refs",)

    def __init__(self, tools: Sequence[Mapping[str, Any]] | None) -> None:
        self._refs: dict[str, ToolRef] = {}
        for tool in tools or ():
            kind = tool.get("type")
            if kind == "namespace":
                for inner in tool.get("tools") or ():
                    ref = ToolRef(inner["name"], tool["name"], inner.get("type") == "custom")
                    self._refs[flat_name(ref)] = ref
            elif kind in ("function", "custom"):
                ref = ToolRef(tool["name"], None, kind == "custom")
                self._refs[ref.name] = ref

    def ref(self, flat: str) -> ToolRef:
        """The tool a call of the backend's function `flat` names (a function of that name when
        the client gave no such tool: the model's call is reported as it came)."""
        return self._refs.get(flat) or ToolRef(flat)

    def __bool__(self) -> bool:
        return bool(self._refs)


def flat_name(ref: ToolRef) -> str:
    return ref.name if ref.namespace is None else ref.namespace + NAMESPACE_MARK + ref.name


def _custom_parameters(fmt: Mapping[str, Any] | None) -> dict[str, Any]:
    described: dict[str, Any] = {"type": "string"}
    if fmt and fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        syntax = fmt.get("syntax", "grammar")
        described["description"] = f"Text that follows this {syntax} grammar:\n{fmt['definition']}"
    return {"type": "object", "properties": {_CUSTOM_INPUT: described}, "required": [_CUSTOM_INPUT]}


def chat_function(tool: Mapping[str, Any], namespace: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One flat function or freeform tool (of `namespace`) as a chat function tool."""
    custom = tool.get("type") == "custom"
    ref = ToolRef(tool["name"], None if namespace is None else namespace["name"], custom)
    fn: dict[str, Any] = {"name": flat_name(ref)}
    description = tool.get("description")
    if namespace is not None and namespace.get("description"):
        description = f"{namespace['description']}\n\n{description or ''}".strip()
    if description:
        fn["description"] = description
    if custom:
        fn["parameters"] = _custom_parameters(tool.get("format"))
    else:
        if tool.get("parameters") is not None:
            fn["parameters"] = tool["parameters"]
        if tool.get("strict") is not None:
            fn["strict"] = tool["strict"]
    return {"type": "function", "function": fn}


def split_tools(tools: Sequence[Mapping[str, Any]] | None) -> tuple[list[dict[str, Any]], list[Mapping[str, Any]]]:
    """The client's tools as chat function tools, and the tools the provider runs itself."""
    functions: list[dict[str, Any]] = []
    server: list[Mapping[str, Any]] = []
    for tool in tools or ():
        kind = tool.get("type")
        if kind in ("function", "custom"):
            functions.append(chat_function(tool))
        elif kind == "namespace":
            functions += [chat_function(inner, tool) for inner in tool.get("tools") or ()]
        else:
            server.append(tool)
    return functions, server


def _named(choice: Mapping[str, Any], namespaces: Mapping[str, str]) -> dict[str, Any]:
    name = choice.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("tool_choice of type function needs 'name'", param="tool_choice", code="invalid_value")
    ns = choice.get("namespace") or namespaces.get(name)
    flat = name if not ns else flat_name(ToolRef(name, ns))
    return {"type": "function", "function": {"name": flat}}


def chat_tool_choice(
    choice: str | Mapping[str, Any] | None, functions: Sequence[Mapping[str, Any]]
) -> tuple[str | dict[str, Any] | None, Mapping[str, Any] | None]:
    """The neutral tool choice (chat's form) and, when the client forces a tool the provider
    runs, that choice (which only a backend of the Responses API can honour)."""
    if choice is None or isinstance(choice, str):
        return choice, None
    kind = choice.get("type")
    known = {f["function"]["name"] for f in functions}
    if kind in ("function", "custom"):
        out = _named(choice, {})
        if out["function"]["name"] not in known:
            raise InvalidRequest(
                f"tool_choice names {choice.get('name')!r}, which is not in tools", param="tool_choice"
            )
        return out, None
    if kind == "allowed_tools":
        mode = choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise InvalidRequest("tool_choice.mode must be auto or required", param="tool_choice.mode")
        return mode, None
    return None, choice


def response_format(fmt: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`text.format` as chat's `response_format`; None for plain text."""
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    schema = {k: fmt[k] for k in ("name", "description", "schema", "strict") if fmt.get(k) is not None}
    return {"type": "json_schema", "json_schema": schema}


def text_format(fmt: Mapping[str, Any] | None) -> dict[str, Any]:
    """Chat's `response_format` as `text.format`."""
    if not fmt or fmt.get("type") == "text":
        return {"type": "text"}
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    return {"type": "json_schema", **dict(fmt.get("json_schema") or {})}


def flat_tools(p: Params) -> list[dict[str, Any]]:
    """Chat function tools (and tools the provider runs) as the Responses API's flat tools."""
    out: list[dict[str, Any]] = []
    for tool in p.tools or ():
        fn = tool.get("function") or {}
        flat: dict[str, Any] = {"type": "function", "name": fn.get("name")}
        for key in ("description", "parameters", "strict"):
            if fn.get(key) is not None:
                flat[key] = fn[key]
        out.append(flat)
    return out + [dict(t) for t in p.server_tools or ()]


def flat_tool_choice(p: Params) -> str | dict[str, Any] | None:
    if p.server_tool_choice is not None:
        return dict(p.server_tool_choice)
    choice = p.tool_choice
    if isinstance(choice, Mapping):
        return {"type": "function", "name": (choice.get("function") or {}).get("name")}
    return choice
