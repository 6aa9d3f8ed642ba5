"""The one text prompt a text-only backend takes: chat messages through the backend's chat
template, token ids through its tokenizer, text as it is."""

from typing import Any

from gateway.adapters import template_for, tokenizer_for
from gateway.codec.contract import BackendView
from gateway.neutral.errors import Unsupported
from gateway.neutral.types import Request, Task


def _one(backend: BackendView[Any]) -> Unsupported:
    return Unsupported(
        f"backend {backend.name!r} ({backend.dialect}) takes one prompt per request",
        param="prompt",
        code="unsupported_parameter",
    )


def prompt_text(req: Request, backend: BackendView[Any]) -> str:
    if req.task is Task.CHAT:
        kwargs = req.params.chat_template_kwargs or {}
        tools = [dict(t) for t in req.params.tools] if req.params.tools else None
        return template_for(backend).render(req.messages or [], tools=tools, **kwargs)
    if req.prompt_ids is not None:
        ids = req.prompt_ids
        if ids and isinstance(ids[0], list):
            if len(ids) != 1:
                raise _one(backend)
            ids = ids[0]
        return tokenizer_for(backend).decode(ids)  # type: ignore[arg-type]
    if isinstance(req.prompt, list):
        if len(req.prompt) != 1:
            raise _one(backend)
        return req.prompt[0]
    return req.prompt or ""
