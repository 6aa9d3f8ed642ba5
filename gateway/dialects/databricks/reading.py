"""Reading a Databricks serving endpoint: answers and streams are OpenAI's; error bodies and a
mid-stream error event are Databricks' own."""

from typing import Any

from gateway import jsonutil
from gateway.dialects.openai.reading import OpenAIStreamParser
from gateway.neutral.errors import UpstreamClass, UpstreamError, body_text, clip
from gateway.neutral.events import Event
from gateway.sse import DONE


def error_text(body: bytes) -> str:
    """The message in any of the error bodies Databricks is known to send, `clip`ped."""
    try:
        obj = jsonutil.loads(body)
    except jsonutil.JSONDecodeError:
        return body_text(body)
    text = str(obj)
    if isinstance(obj, dict):
        code, msg, err = obj.get("error_code"), obj.get("message"), obj.get("error")
        if code is not None:
            text = f"{code}: {msg}" if msg else str(code)
        elif isinstance(err, str):
            text = err
        elif isinstance(err, dict) and err.get("message"):
            text = str(err["message"])
        elif msg:
            text = str(msg)
    return clip(text)


class DatabricksStreamParser(OpenAIStreamParser):
    """OpenAI's chunk parser, plus Databricks' own error body arriving as an event."""

    __slots__ = ()

    def on_event(self, data: bytes, out: list[Event]) -> None:
        if data != DONE and b'"error_code"' in data:
            obj: Any = jsonutil.loads(data)
            if isinstance(obj, dict) and obj.get("error_code") is not None and not obj.get("choices"):
                raise UpstreamError(
                    f"backend error mid-stream: {error_text(data)}", upstream_class=UpstreamClass.MIDSTREAM
                )
        super().on_event(data, out)
