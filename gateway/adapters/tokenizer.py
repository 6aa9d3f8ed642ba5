"""The model's tokenizer, loaded from local files, and streaming detokenization.

Backends that speak token ids (or report them) need the exact model tokenizer to bridge to
text-only clients and back. Everything here works offline: `tokenizer.json` is read with the
`tokenizers` library, `tokenizer_config.json` supplies the bos/eos tokens.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from tokenizers import Tokenizer as _HFTokenizer

from gateway.adapters.counting import PieceCounter
from gateway.adapters.words import WordCounter

_REPLACEMENT = "\ufffd"
# Ids this many are decoded by the batch call, which releases the GIL.
_LONG_IDS = 1024
# Past this many characters the library's scratch memory runs to hundreds of megabytes.
_HUGE = 1 << 20
_INT = {int}


def _libc_trim() -> Callable[[], None]:
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to ask
        return lambda: None

    def run() -> None:
        trim(0)

    return run


# glibc keeps freed pages for reuse; after a huge text they would hold the process's memory at
# its peak for good, so they are handed back (a few milliseconds, in the worker thread).
_return_freed_memory = _libc_trim()


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def read_config(folder: str | Path) -> dict[str, Any]:
    """tokenizer_config.json of `folder` as a dict ({} when the file is absent)."""
    path = Path(folder) / "tokenizer_config.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


def special_tokens(config: dict[str, Any]) -> dict[str, str | None]:
    """The named special tokens a chat template may refer to (bos_token, eos_token, ...)."""
    names = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")
    return {n: _token_text(config.get(n)) for n in names}


class Tokenizer:
    """A thin, typed face over a `tokenizers.Tokenizer` plus the model's named special tokens."""

    def __init__(self, inner: _HFTokenizer, config: dict[str, Any] | None = None) -> None:
        self._tok = inner
        config = config or {}
        self.specials = special_tokens(config)
        self.bos_token: str | None = self.specials["bos_token"]
        self.eos_token: str | None = self.specials["eos_token"]
        self.eos_token_id: int | None = None
        if self.eos_token is not None:
            self.eos_token_id = self._tok.token_to_id(self.eos_token)
        vocab = self._tok.get_vocab(with_added_tokens=True)
        if self._register_added(config, vocab):
            vocab = self._tok.get_vocab(with_added_tokens=True)
        # The ids it has: 0 to its highest (a vocabulary may leave some unused ids between).
        self.size = max(vocab.values(), default=-1) + 1
        # Counts and ids are the whole text's: no length cut or padding from tokenizer.json.
        self._tok.no_truncation()
        self._tok.no_padding()
        self._words: WordCounter | None = None  # `count` checks the word counter before it is kept
        self._words = WordCounter.build(self._tok, self.count)
        self._pieces = PieceCounter.build(self._tok, self.count)

    def _register_added(self, config: dict[str, Any], known: dict[str, int]) -> bool:
        # tokenizer_config.json can declare special tokens tokenizer.json lacks; add them so
        # they encode as one id and decoding can skip them. Whether there were any.
        extra: list[str] = []
        decoder = config.get("added_tokens_decoder")
        if isinstance(decoder, dict):
            for entry in decoder.values():
                text = _token_text(entry)
                if text is not None and entry.get("special", True) and text not in known:
                    extra.append(text)
        for value in config.get("additional_special_tokens") or []:
            text = _token_text(value)
            if text is not None and text not in known:
                extra.append(text)
        if extra:
            self._tok.add_special_tokens(sorted(set(extra)))
        return bool(extra)

    @classmethod
    def load(cls, folder: str) -> Tokenizer:
        path = Path(folder) / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer.json in {folder}")
        return cls(_HFTokenizer.from_file(str(path)), read_config(folder))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = self._encoding(text, add_special_tokens).ids
        return ids

    def _encoding(self, text: str, add_special_tokens: bool) -> Any:
        # The "fast" batch call skips the character offsets nothing here reads: a quarter less
        # work on a short prompt (123k instructions against 168k for a chat prompt of 23 tokens),
        # most of the time and memory on a long text. It also lets go of the GIL while it works,
        # so a long text encoded in a worker thread does not hold up the event loop's thread.
        encoding = self._tok.encode_batch_fast([text], add_special_tokens=add_special_tokens)[0]
        if len(text) >= _HUGE:
            _return_freed_memory()
        return encoding

    def unknown_id(self, ids: Sequence[object]) -> object | None:
        """The first of `ids` that is no id of this vocabulary (not an integer, or out of its
        range), or None: the library fails on a negative or huge id and reads an unknown one as
        no text at all."""
        size = self.size
        if set(map(type, ids)) <= _INT:
            whole = cast("Sequence[int]", ids)
            if not whole or (min(whole) >= 0 and max(whole) < size):
                return None
        return next(i for i in ids if type(i) is not int or not 0 <= i < size)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        if len(ids) >= _LONG_IDS:
            text: str = self._tok.decode_batch([list(ids)], skip_special_tokens=skip_special_tokens)[0]
        else:
            text = self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return text

    def count(self, text: str) -> int:
        words = self._words
        if words is not None:
            n = words.count(text)
            if n is not None:
                return n
        return len(self._encoding(text, False))  # the length, without a list of every id

    def count_prompt(self, text: str) -> int:
        """`count`, for text that repeats from request to request (a chat prompt): what was
        counted before is not counted again (gateway.adapters.counting)."""
        return self.count(text) if self._pieces is None else self._pieces.count(text)

    def token_to_id(self, token: str) -> int | None:
        found: int | None = self._tok.token_to_id(token)
        return found


class IncrementalDetokenizer:
    """Token ids in, text out, a few ids at a time, without ever splitting a character.

    Decoding ids one by one loses what decoders do across token boundaries (byte-level pieces
    of one character, a word-start marker that turns into a space only after another word).
    So each step decodes a short window that starts a few tokens back and emits the part that
    goes beyond what that window decoded to before. While the new text ends in U+FFFD the
    last character is still incomplete, so nothing is emitted until the next ids arrive.
    """

    __slots__ = ("_ids", "_prefix", "_read", "_skip", "_tok")

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._prefix = 0  # window start: text up to here has been emitted and is settled
        self._read = 0  # ids before this have been emitted

    def feed(self, ids: Sequence[int]) -> str:
        if not ids:
            return ""
        self._ids.extend(ids)
        return self._advance(final=False)

    def flush(self) -> str:
        """End of stream: whatever is left, even an incomplete character."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        if self._read >= len(self._ids):
            return ""
        before = self._tok.decode(self._ids[self._prefix : self._read], self._skip)
        after = self._tok.decode(self._ids[self._prefix :], self._skip)
        if len(after) <= len(before) or (after.endswith(_REPLACEMENT) and not final):
            if final:
                self._read = len(self._ids)
            return ""
        # The window start moves up to the old read point: those tokens are settled context.
        self._prefix = self._read
        self._read = len(self._ids)
        return after[len(before) :]
