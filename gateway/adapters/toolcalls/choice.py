"""What a request's `tool_choice` asks of a backend that is sent text and answers text.

`auto` needs the tools in the prompt and the calls read from the answer; `none` needs neither
(the tools are left out of the prompt, so the model has nothing to call); `required` and a named
function need the answer held to calls, which only a constraint on the backend's decoding can
do: a JSON schema (a TGI `grammar`, a guided-decoding schema) that forces a list of calls, built
as vLLM builds it for the same tool choices. A format that is not JSON cannot be forced that
way, and such a request is refused rather than answered with a call it did not ask for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, NamedTuple


class ToolAction(StrEnum):
    NONE = "none"  # render no tools, read no calls
    AUTO = "auto"  # render the tools, read whatever calls the model makes
    FORCE = "force"  # render the tools, constrain the answer with `schema`, read it as forced
    REFUSE = "refuse"  # the request cannot be served as asked: `reason` says why


class ToolPlan(NamedTuple):
    action: ToolAction
    schema: dict[str, Any] | None = None
    reason: str | None = None


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = tool.get("function", tool)
    return fn if isinstance(fn, Mapping) else {}


def chosen_name(tool_choice: Any) -> str | None:
    """The function a named tool choice names (OpenAI's chat form or the Responses form)."""
    if isinstance(tool_choice, Mapping):
        name = _function(tool_choice).get("name")
        return name if isinstance(name, str) else None
    return None


def calls_schema(
    args_key: str,
    tools: Sequence[Mapping[str, Any]],
    tool_choice: Any,
    parallel_tool_calls: bool | None = None,
) -> dict[str, Any]:
    """A JSON schema for a list of calls `{"name": ..., args_key: {...}}` to the tools allowed:
    all of them for `required`, the named one (once) for a named choice. Each tool's `$defs`
    are gathered at the top, where their references point. ValueError when the named tool is
    not among the tools or two tools define one name differently."""
    name = chosen_name(tool_choice)
    allowed = [t for t in tools if name is None or _function(t).get("name") == name]
    if not allowed:
        raise ValueError(f"tool_choice names {name!r}, which is not among the request's tools")
    defs: dict[str, Any] = {}
    variants = []
    for tool in allowed:
        fn = _function(tool)
        params = dict(fn.get("parameters") or {})
        for def_name, def_schema in (params.pop("$defs", None) or {}).items():
            if defs.setdefault(def_name, def_schema) != def_schema:
                raise ValueError(f"tools define {def_name!r} in $defs differently")
        variants.append(
            {
                "properties": {
                    "name": {"type": "string", "enum": [fn.get("name")]},
                    args_key: params or {"type": "object", "properties": {}},
                },
                "required": ["name", args_key],
            }
        )
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": variants}}
    if name is not None or parallel_tool_calls is False:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


def plan_tool_choice(
    args_key: str | None,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: Any,
    parallel_tool_calls: bool | None = None,
) -> ToolPlan:
    """What to do for `tool_choice` with a format whose forced calls put their arguments under
    `args_key` (None: a format that cannot be forced)."""
    if tool_choice is None or tool_choice == "auto":
        return ToolPlan(ToolAction.AUTO if tools else ToolAction.NONE)
    if tool_choice == "none":
        return ToolPlan(ToolAction.NONE)
    if tool_choice != "required" and chosen_name(tool_choice) is None:
        return ToolPlan(
            ToolAction.REFUSE, reason=f"tool_choice {tool_choice!r} is not none, auto, required or a function"
        )
    if not tools:
        return ToolPlan(ToolAction.REFUSE, reason="tool_choice asks for a tool call but the request has no tools")
    if args_key is None:
        return ToolPlan(
            ToolAction.REFUSE,
            reason="this backend's tool-call format cannot be forced; use tool_choice auto or none",
        )
    try:
        return ToolPlan(ToolAction.FORCE, calls_schema(args_key, tools, tool_choice, parallel_tool_calls))
    except ValueError as e:
        return ToolPlan(ToolAction.REFUSE, reason=str(e))
