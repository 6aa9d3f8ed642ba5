"""Tool calls read out of the text of a backend that only carries text (TGI `/generate`,
Triton's generate, MindIE's `/infer`): the gateway renders the tools into the prompt with the
model's chat template, and the model writes its calls in its own format, which a backend's
`tool_parser:` names. This package reads those formats, whole or streamed, into OpenAI-shaped
calls and neutral events; writes a call as each format's models do; and says what a request's
`tool_choice` needs. It is sans-IO and imports only the neutral form. The formats are described
in docs/tools.md.
"""

from gateway.adapters.toolcalls.calls import Parsed, ToolCall, merge
from gateway.adapters.toolcalls.choice import ToolAction, ToolPlan
from gateway.adapters.toolcalls.core import CallStream
from gateway.adapters.toolcalls.registry import PARSERS, ToolParser, get_parser, render_call

__all__ = [
    "PARSERS",
    "CallStream",
    "Parsed",
    "ToolAction",
    "ToolCall",
    "ToolParser",
    "ToolPlan",
    "get_parser",
    "merge",
    "render_call",
]
