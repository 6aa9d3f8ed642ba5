"""The one text prompt a text-only backend takes: chat messages through the backend's chat
template, token ids through its tokenizer, text as it is."""

from collections.abc import Sequence
from typing import Any

from gateway.adapters import template_for, tokenizer_for
from gateway.codec.contract import BackendView
from gateway.neutral.errors import InvalidRequest, Unsupported
from gateway.neutral.types import Request, Task


def _one(backend: BackendView[Any]) -> Unsupported:
    return Unsupported(
        f"backend {backend.name!r} ({backend.dialect}) takes one prompt per request",
        param="prompt",
        code="unsupported_parameter",
    )


def ids_text(ids: Sequence[int], backend: BackendView[Any]) -> str:
    """A prompt's token ids as the text they stand for, through the backend's tokenizer; an id
    its vocabulary lacks is the client's mistake, named in a 400."""
    tok = tokenizer_for(backend)
    bad = tok.unknown_id(ids)
    if bad is not None:
        raise InvalidRequest(
            f"token id {bad!r} in the prompt is not in the vocabulary of backend {backend.name!r} "
            f"(its tokenizer's ids are 0 to {tok.size - 1})",
            param="prompt",
            code="invalid_token_id",
        )
    return tok.decode(ids)


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
        return ids_text(ids, backend)  # type: ignore[arg-type]
    if isinstance(req.prompt, list):
        if len(req.prompt) != 1:
            raise _one(backend)
        return req.prompt[0]
    return req.prompt or ""
