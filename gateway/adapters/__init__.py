"""Adapters that bridge capability gaps between a client's dialect and a backend.

The tokenizer and the chat template are loaded from the folder a backend's `tokenizer:` setting
names, once per backend, and cached in `Backend.extras`. Nothing is ever fetched from the
network: a model's files must be on local disk.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.adapters.template import ChatTemplate
from gateway.adapters.tokenizer import IncrementalDetokenizer, Tokenizer
from gateway.core.errors import Unsupported

if TYPE_CHECKING:
    from gateway.core.routing import Backend

log = logging.getLogger("gateway")

_HOW = "set `tokenizer:` on the backend to a folder with tokenizer.json and tokenizer_config.json"


def _folder(backend: Backend, what: str) -> str:
    folder = backend.conf.tokenizer
    if not folder:
        raise Unsupported(
            f"backend {backend.name!r} needs the model's {what} for this request and none is configured; {_HOW}",
            code="tokenizer_not_configured",
        )
    return folder


def tokenizer_for(backend: Backend) -> Tokenizer:
    """The backend's tokenizer, loaded on first use."""
    tok = backend.extras.get("tokenizer")
    if isinstance(tok, Tokenizer):
        return tok
    folder = _folder(backend, "tokenizer")
    try:
        tok = Tokenizer.load(folder)
    except Exception as e:  # the tokenizers library raises bare Exception on bad files
        log.error("backend %s: cannot load the tokenizer from %s: %s", backend.name, folder, e)
        raise Unsupported(
            f"backend {backend.name!r}: the configured tokenizer could not be loaded; {_HOW}",
            code="tokenizer_not_configured",
        ) from None
    backend.extras["tokenizer"] = tok
    return tok


def template_for(backend: Backend) -> ChatTemplate:
    """The backend's chat template, loaded on first use."""
    tpl = backend.extras.get("chat_template")
    if isinstance(tpl, ChatTemplate):
        return tpl
    folder = _folder(backend, "chat template")
    try:
        tpl = ChatTemplate.load(folder)
    except Exception as e:  # a missing file, bad JSON or a template that does not compile
        log.error("backend %s: cannot load the chat template from %s: %s", backend.name, folder, e)
        raise Unsupported(
            f"backend {backend.name!r} has no usable chat template in its `tokenizer:` folder "
            "(tokenizer_config.json `chat_template` or chat_template.jinja)",
            code="chat_template_missing",
        ) from None
    backend.extras["chat_template"] = tpl
    return tpl


def count_tokens(backend: Backend, text: str) -> int | None:
    """The backend tokenizer's count for `text`, or None when no tokenizer is configured:
    usage for backends that do not report prompt tokens is counted, never guessed."""
    return tokenizer_for(backend).count(text) if backend.conf.tokenizer else None


__all__ = [
    "ChatTemplate",
    "IncrementalDetokenizer",
    "Tokenizer",
    "count_tokens",
    "template_for",
    "tokenizer_for",
]
