"""Triton generate answers as clients expect them: one JSON object, or SSE `data: ` events.

There is no finish reason, no usage and no terminator in this dialect: the stream is one event
per text delta and ends when the connection closes.
"""

from typing import Any

from gateway import jsonutil
from gateway.core.errors import GatewayError
from gateway.core.types import EmbeddingResult, Event, Request, Result, TextDelta
from gateway.dialects.base import RenderContext

_dumps = jsonutil.dumps
DEFAULT_VERSION = "1"


def _head(req: Request, ctx: RenderContext) -> dict[str, Any]:
    head: dict[str, Any] = {}
    raw_id = (req.raw or {}).get("id")
    if isinstance(raw_id, str):
        head["id"] = raw_id
    head["model_name"] = req.model or ctx.model
    head["model_version"] = req.path_params.get("version", DEFAULT_VERSION)
    return head


def render_result(result: Result | EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(result, Result)
    out = _head(req, ctx)
    out["text_output"] = result.choices[0].text if result.choices else ""
    return _dumps(out)


def error_event(err: GatewayError) -> bytes:
    return b"data: " + _dumps({"error": err.message}) + b"\n\n"


class TritonStreamRenderer:
    """Each text delta becomes `data: {id?, model_name, model_version, text_output}`."""

    content_type = "text/event-stream; charset=utf-8"

    def __init__(self, req: Request, ctx: RenderContext) -> None:
        self._prefix = b"data: " + _dumps(_head(req, ctx))[:-1] + b',"text_output":'
        self._sent = False
        self._failed = False

    def start(self) -> bytes:
        return b""

    def render(self, events: list[Event]) -> bytes:
        parts = []
        for ev in events:
            if type(ev) is TextDelta and ev.index == 0:
                assert isinstance(ev, TextDelta)
                if ev.text:
                    parts.append(self._prefix + _dumps(ev.text) + b"}\n\n")
        if parts:
            self._sent = True
        return b"".join(parts)

    def error(self, err: GatewayError) -> bytes:
        self._failed = True
        return error_event(err)

    def end(self) -> bytes:
        # A model that generated nothing still answers once, as Triton does with its final response.
        if not self._sent and not self._failed:
            return self._prefix + b'""}\n\n'
        return b""


def stream_renderer(req: Request, ctx: RenderContext) -> TritonStreamRenderer:
    return TritonStreamRenderer(req, ctx)
