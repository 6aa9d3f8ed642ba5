"""Prompt token counts that reuse the counts of text seen before.

The tokenizer cuts its input at added tokens (the model's special tokens) before anything else,
and encodes each stretch between two of them on its own. So a prompt holds as many tokens as
it has added tokens, plus the tokens of each stretch. A chat prompt is mostly stretches seen
before: the template's scaffolding, and turn after turn the same earlier messages, each
between the template's special tokens. Their counts are remembered, so a new turn costs the
tokenizer only its new text rather than the whole conversation again. When the memory is full
the oldest counts are let go first: one that is needed again costs a tokenizer call, and a hit
stays a single lookup (no reordering, no lock).

That holds only when each stretch really is encoded alone: no added token that swallows the
spaces beside it, matches only whole words or matches after normalization, and no
pre-tokenizer that treats the text's first stretch differently from the others (Metaspace
with `prepend_scheme: first`). `PieceCounter.build` says None for any other tokenizer, and
for one whose stretch counts do not add up to its own count on a few sample prompts; such a
tokenizer counts every prompt whole.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

# How much text the counts are kept for, in characters and in stretches (so that many short
# stretches cannot hold more memory than a few long ones), and the longest one stretch may be.
CACHE_CHARS = 1 << 21
CACHE_ENTRIES = 1 << 14
LONGEST_CACHED = CACHE_CHARS // 4


def _metaspace_first(tree: Any) -> bool:
    """Whether a pre-tokenizer (as its JSON form) holds a Metaspace that marks only the first
    stretch of the text."""
    if isinstance(tree, dict):
        if tree.get("type") == "Metaspace" and tree.get("prepend_scheme") == "first":
            return True
        return any(_metaspace_first(v) for v in tree.values())
    if isinstance(tree, list):
        return any(_metaspace_first(v) for v in tree)
    return False


def _samples(tokens: list[str]) -> Iterable[str]:
    first, last = tokens[0], tokens[-1]
    yield f"{first}user\nHello there, how are you?{last}\n{first}assistant\n"
    yield f" leading space{last}{last}  two  spaces {first}\n\ntrailing "
    yield f"héllo 你好 🙂{first}{first}x{last}y"


class PieceCounter:
    """Counts a text's tokens as its added tokens plus the remembered count of each stretch."""

    def __init__(self, count: Callable[[str], int], added: Iterable[str]) -> None:
        self._count = count
        alternatives = "|".join(re.escape(t) for t in sorted(added, key=len, reverse=True))
        # Longest first: at one position the regex takes the first alternative that matches,
        # which makes it the longest, as the tokenizer's own matcher does.
        self._split = re.compile(f"({alternatives})").split
        self._known: OrderedDict[str, int] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()  # counts may be taken in a worker thread too

    @classmethod
    def build(cls, inner: Any, count: Callable[[str], int]) -> PieceCounter | None:
        """A counter for the `tokenizers.Tokenizer` `inner`, or None when its stretches are not
        encoded alone."""
        added = list(inner.get_added_tokens_decoder().values())
        if not added or any(t.lstrip or t.rstrip or t.single_word or t.normalized or not t.content for t in added):
            return None
        pre = inner.pre_tokenizer
        if pre is not None and _metaspace_first(json.loads(pre.__getstate__())):
            return None
        tokens = [t.content for t in added]
        counter = cls(count, tokens)
        if any(counter.count(text) != count(text) for text in _samples(tokens)):
            return None
        counter.clear()
        return counter

    def count(self, text: str) -> int:
        parts = self._split(text)
        n = len(parts) // 2  # the split leaves the added tokens at odd places
        for piece in parts[::2]:
            if piece:
                n += self._piece(piece)
        return n

    def _piece(self, piece: str) -> int:
        n = self._known.get(piece)  # one call, safe without the lock
        if n is not None:
            return n
        n = self._count(piece)
        if len(piece) <= LONGEST_CACHED:
            with self._lock:
                if piece not in self._known:
                    self._known[piece] = n
                    self._chars += len(piece)
                    while self._chars > CACHE_CHARS or len(self._known) > CACHE_ENTRIES:
                        old, _ = self._known.popitem(last=False)
                        self._chars -= len(old)
        return n

    def clear(self) -> None:
        with self._lock:
            self._known.clear()
            self._chars = 0
