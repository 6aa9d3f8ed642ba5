"""Text for text-only backends: chat messages through the backend's chat template, token ids
through its tokenizer (both from gateway.adapters, configured by the backend's `tokenizer:`)."""

from typing import Any

from gateway.core.errors import Unsupported
from gateway.core.routing import Backend
from gateway.core.types import Message, Request, Task


def _adapters() -> Any:
    try:
        import gateway.adapters as adapters
    except ImportError:  # pragma: no cover - the adapters package ships with the gateway
        raise Unsupported("this gateway build has no tokenizer/chat-template adapters") from None
    return adapters


def _message_dict(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.text() if isinstance(m.content, list) else m.content}
    if m.tool_calls:
        out["tool_calls"] = m.tool_calls
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        out["name"] = m.name
    return out


def prompt_text(req: Request, backend: Backend) -> str:
    """The prompt a text-only backend takes for this request."""
    if req.task is Task.CHAT:
        tmpl = _adapters().template_for(backend)
        kwargs = req.params.get("chat_template_kwargs") or {}
        msgs = [_message_dict(m) for m in req.messages or ()]
        return str(tmpl.render(msgs, tools=req.params.get("tools"), add_generation_prompt=True, **kwargs))
    if req.prompt_ids is not None:
        ids = req.prompt_ids
        if ids and isinstance(ids[0], list):
            if len(ids) != 1:
                raise Unsupported("only one prompt per request is supported by this backend", param="prompt")
            ids = ids[0]
        return str(_adapters().tokenizer_for(backend).decode(ids))
    if isinstance(req.prompt, list):
        if len(req.prompt) != 1:
            raise Unsupported("only one prompt per request is supported by this backend", param="prompt")
        return req.prompt[0]
    return req.prompt or ""
