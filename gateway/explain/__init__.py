"""`gateway explain`: what the gateway would do with one client request, without sending it.

`explain` works it out with the gateway's own parsing, routing, plan and call building
(gateway.explain.core) into an `Explanation` (gateway.explain.record), which `render_text` and
`render_json` show (gateway.explain.render). See docs/explain.md.
"""

from gateway.explain.core import ExplainError, explain
from gateway.explain.record import ClientError, Explanation, Fanout, ParamFate, Upstream
from gateway.explain.render import as_json, render_json, render_text

__all__ = [
    "ClientError",
    "ExplainError",
    "Explanation",
    "Fanout",
    "ParamFate",
    "Upstream",
    "as_json",
    "explain",
    "render_json",
    "render_text",
]
