"""Adapters that bridge capability gaps between a client's dialect and a backend.

The tokenizer and the chat template are loaded from the folder a backend's `tokenizer:` setting
names, once per folder, and kept for the life of the process. Nothing is ever fetched from the
network: a model's files must be on local disk.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from gateway.adapters.template import ChatTemplate
from gateway.adapters.tokenizer import IncrementalDetokenizer, Tokenizer
from gateway.codec.contract import BackendView
from gateway.neutral.errors import Unsupported

log = logging.getLogger("gateway")

# A small model's files that ship with the gateway: a byte-level tokenizer and a ChatML chat
# template that writes tools and tool calls as Hermes' format does. The embedded default's
# simulated servers that carry only text use them (docs/tools.md).
DEMO_MODEL = str(Path(__file__).parent / "demo_model")
_HOW = "set `tokenizer:` on the backend to a folder with tokenizer.json and tokenizer_config.json"
# Loaded files by folder. Requests that need them may run in worker threads (large prompts are
# tokenized off the event loop), so loading is locked; a loaded file is only ever read.
_tokenizers: dict[str, Tokenizer] = {}
_templates: dict[str, ChatTemplate] = {}
_lock = threading.Lock()


def _folder(backend: BackendView[Any], what: str) -> str:
    if not backend.tokenizer:
        raise Unsupported(
            f"backend {backend.name!r} needs the model's {what} for this request and none is configured; {_HOW}",
            code="tokenizer_not_configured",
        )
    return backend.tokenizer


def tokenizer_for(backend: BackendView[Any]) -> Tokenizer:
    """The backend's tokenizer, loaded on first use."""
    folder = _folder(backend, "tokenizer")
    tok = _tokenizers.get(folder)
    if tok is not None:
        return tok
    with _lock:
        if folder not in _tokenizers:
            try:
                _tokenizers[folder] = Tokenizer.load(folder)
            except Exception as e:  # the tokenizers library raises bare Exception on bad files
                log.error("backend %s: cannot load the tokenizer from %s: %s", backend.name, folder, e)
                raise Unsupported(
                    f"backend {backend.name!r}: the configured tokenizer could not be loaded; {_HOW}",
                    code="tokenizer_not_configured",
                ) from None
        return _tokenizers[folder]


def template_for(backend: BackendView[Any]) -> ChatTemplate:
    """The backend's chat template, loaded on first use."""
    folder = _folder(backend, "chat template")
    tpl = _templates.get(folder)
    if tpl is not None:
        return tpl
    with _lock:
        if folder not in _templates:
            try:
                _templates[folder] = ChatTemplate.load(folder)
            except Exception as e:  # a missing file, bad JSON or a template that does not compile
                log.error("backend %s: cannot load the chat template from %s: %s", backend.name, folder, e)
                raise Unsupported(
                    f"backend {backend.name!r} has no usable chat template in its `tokenizer:` folder "
                    "(tokenizer_config.json `chat_template` or chat_template.jinja)",
                    code="chat_template_missing",
                ) from None
        return _templates[folder]


def optional_tokenizer(backend: BackendView[Any]) -> Tokenizer | None:
    """The backend's tokenizer when one is configured and loads; None otherwise."""
    if not backend.tokenizer:
        return None
    try:
        return tokenizer_for(backend)
    except Unsupported:
        return None


def count_tokens(backend: BackendView[Any], prompt: str) -> int | None:
    """The backend tokenizer's count for `prompt`, or None when no tokenizer is configured:
    usage for backends that do not report prompt tokens is counted, never guessed. (A prompt's
    stretches seen before are not counted again: `Tokenizer.count_prompt`.)"""
    return tokenizer_for(backend).count_prompt(prompt) if backend.tokenizer else None


__all__ = [
    "DEMO_MODEL",
    "ChatTemplate",
    "IncrementalDetokenizer",
    "Tokenizer",
    "count_tokens",
    "optional_tokenizer",
    "template_for",
    "tokenizer_for",
]
