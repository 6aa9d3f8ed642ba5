"""Token counts of plain ASCII text, word by word, for byte-level BPE tokenizers.

A byte-level BPE tokenizer (GPT-2's kind, and Llama 3's, Qwen's and most current models') cuts a
text into words with a regular expression, maps each byte to a printable character, and merges
each word on its own. So a text's count is the sum of its words' counts, and a word's count
never changes: once known, it is a lookup. The library's own call spends most of its time per
word on bookkeeping the count does not need (offsets, the normalized string's alignments), about
three quarters of a microsecond a word; an answer of a few hundred words, counted for its usage
where the backend reports none (Triton), cost a stream of 200 events as much as all its reading.

Only what can be matched exactly is counted this way: ASCII text (where the tokenizer's Unicode
classes `\\p{L}` and `\\p{N}` are plain letter and digit ranges, and the Unicode normalizations
change nothing), without any of the tokenizer's added tokens in it, under a pre-tokenizer that is
a byte-level one with GPT-2's expression, or a split by an expression followed by a byte-level
one that does not split again. `WordCounter.build` says None for any other tokenizer, and for one
whose word counts do not add up to its own count on a few sample texts; anything else (a text
with other characters, one holding an added token) is counted by the library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

# The expression a byte-level pre-tokenizer splits with when `use_regex` is set (GPT-2's).
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# The expressions of Llama 3's and Qwen 2's tokenizer.json (a split before a byte-level step).
LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Expressions under which a text whose only whitespace is single spaces between other
# characters is cut at each space: no alternative matches a space but as its first character
# (` ?X`, an optional leading character before letters, whitespace runs, which over one space
# before a non-space take that space alone), so when the words cover the text each space begins
# one, and a word begun at a space ends before the next, decided by the characters up to it
# (`(?!\S)` looks one character past a run of whitespace). Such a text's count is the sum of
# its space-led pieces' counts, each remembered whole: a split, not the expression run over it.
_CUT_AT_SPACES = frozenset((GPT2, LLAMA3, QWEN2))
# The Unicode classes the usual expressions use, as they are within ASCII.
_ASCII_CLASSES = {"L": "A-Za-z", "N": "0-9"}
# Normalizations that leave ASCII text as it is.
_IDENTITY_ON_ASCII = frozenset(("NFC", "NFD", "NFKC", "NFKD"))
# Texts longer than this go to the library, which lets go of the interpreter while it works.
LONGEST = 1 << 14
# How many words' counts are kept (when full, they are let go of all at once).
KEPT = 1 << 14
# Words longer than this (a long run of spaces or punctuation) are counted but not kept.
_LONGEST_KEPT = 64
_SAMPLES = (
    "Hello there, how are you? I'm fine; it's 2024-05-17 and we've 3,141.59 reasons.",
    "  two  spaces,\ttabs\t\tand\n\nnew lines \n trailing   ",
    "CAPS'S THEY'LL 'tis x1y2z3 a_b-c.d!!?? (quoted) \"q\" [1] {a: 'b'} <tag/> ~`^|\\",
    "def f(x):\n    return x ** 2  # 12345678901234567890\r\n",
)


def _byte_chars() -> dict[int, str]:
    """The character each ASCII byte becomes in a byte-level tokenizer's words: itself when it
    is printable, else one of the characters from U+0100 on, in byte order (GPT-2's table)."""
    kept = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table: dict[int, str] = {}
    shifted = 0
    for b in range(256):
        if b in kept:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shifted)
            shifted += 1
    return {b: c for b, c in table.items() if b < 128 and c != chr(b)}


_BYTE_CHARS = _byte_chars()


def ascii_expression(pattern: str) -> re.Pattern[str] | None:
    """`pattern` (the tokenizer's Oniguruma expression) as a Python one that splits ASCII text
    the same way; None when it uses anything but the classes known within ASCII."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt in "pP":
                end = pattern.find("}", i)
                name = pattern[i + 3 : end] if pattern.startswith("{", i + 2) and end > 0 else None
                if nxt == "P" or name not in _ASCII_CLASSES:
                    return None
                chars = _ASCII_CLASSES[name]
                out.append(chars if in_class else f"[{chars}]")
                i = end + 1
                continue
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "[":
            if in_class:
                return None  # a class within a class: Oniguruma's, not Python's
            in_class = True
            # A `]` or `^]` right after the opening is a character of the class, not its end.
            if pattern.startswith("^]", i + 1) or pattern.startswith("]", i + 1):
                step = 3 if pattern.startswith("^]", i + 1) else 2
                out.append(pattern[i : i + step])
                i += step
                continue
        elif c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    try:
        return re.compile("".join(out), re.ASCII)
    except re.error:
        return None


def _splitter(pre: Any) -> tuple[re.Pattern[str], bool, bool] | None:
    """The expression words are cut with, whether a space is put before the text, and whether
    the expression cuts at every single space (`_CUT_AT_SPACES`), for a pre-tokenizer (its JSON
    form); None when it is not one this module can follow."""
    if not isinstance(pre, dict):
        return None
    kind = pre.get("type")
    if kind == "ByteLevel" and pre.get("use_regex", True):
        found = ascii_expression(GPT2)
        return None if found is None else (found, bool(pre.get("add_prefix_space")), True)
    if kind != "Sequence":
        return None
    steps = pre.get("pretokenizers")
    if not isinstance(steps, list) or len(steps) != 2:
        return None
    split, level = steps
    if not (isinstance(split, dict) and isinstance(level, dict)):
        return None
    if split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert"):
        return None
    if level.get("type") != "ByteLevel" or level.get("use_regex", True) or level.get("add_prefix_space"):
        return None
    expression = (split.get("pattern") or {}).get("Regex")
    found = ascii_expression(expression) if isinstance(expression, str) else None
    return None if found is None else (found, False, expression in _CUT_AT_SPACES)


class WordCounter:
    """Counts an ASCII text's tokens as the sum of its words' remembered counts."""

    __slots__ = ("_added", "_find", "_known", "_prefix", "_spaced", "_tokenize")

    def __init__(
        self,
        find: re.Pattern[str],
        prefix: bool,
        tokenize: Callable[[str], list[Any]],
        added: list[str],
        at_spaces: bool = False,
    ) -> None:
        self._find = find.findall
        self._prefix = prefix
        self._tokenize = tokenize
        self._known: dict[str, int] = {}
        # Under an expression that cuts at every single space: a piece between spaces -> the
        # count of that piece with its space before it.
        self._spaced: dict[str, int] | None = {} if at_spaces else None
        alternatives = "|".join(re.escape(t) for t in added if t)
        self._added = re.compile(alternatives).search if alternatives else None

    @classmethod
    def build(cls, inner: Any, count: Callable[[str], int]) -> WordCounter | None:
        """A counter for the `tokenizers.Tokenizer` `inner` (whose own count is `count`), or None
        when its counts cannot be had word by word."""
        tree = json.loads(inner.to_str())
        normalizer = tree.get("normalizer")
        if normalizer is not None and normalizer.get("type") not in _IDENTITY_ON_ASCII:
            return None
        if (tree.get("model") or {}).get("type") != "BPE":
            return None
        how = _splitter(tree.get("pre_tokenizer"))
        if how is None:
            return None
        added = [t.content for t in inner.get_added_tokens_decoder().values()]
        counter = cls(how[0], how[1], inner.model.tokenize, added, how[2])
        if any(counter.count(text) != count(text) for text in _SAMPLES):
            return None
        counter._known.clear()
        if counter._spaced is not None:
            counter._spaced.clear()
        return counter

    def count(self, text: str) -> int | None:
        """The tokens of `text`, or None when it is not a text this counter can count (empty,
        longer than LONGEST, not ASCII, or holding an added token)."""
        if not text or len(text) > LONGEST or not text.isascii():
            return None
        if self._added is not None and self._added(text) is not None:
            return None
        if self._prefix and not text.startswith(" "):
            text = " " + text
        spaced = self._spaced
        if spaced is not None:
            # A text of printable characters and single spaces (no space at either end of its
            # body): cut at its spaces, each piece counted with the space before it.
            body = text[1:] if text[0] == " " else text
            if body and body.isprintable() and "  " not in body and body[0] != " " and body[-1] != " ":
                pieces = body.split(" ")
                n = 0
                if body is text:  # the first piece has no space before it
                    found = self._words(pieces.pop(0))
                    if found is None:
                        return None
                    n = found
                try:
                    return n + sum(map(spaced.__getitem__, pieces))
                except KeyError:
                    pass
                for piece in pieces:
                    known = spaced.get(piece)
                    if known is None:
                        known = self._words(" " + piece)
                        if known is None:
                            return None
                        if len(piece) < _LONGEST_KEPT:
                            if len(spaced) >= KEPT:
                                spaced.clear()
                            spaced[piece] = known
                    n += known
                return n
        return self._words(text)

    def _words(self, text: str) -> int | None:
        """`text`'s count, its words found by the expression; None when they leave a stretch."""
        words = self._find(text)
        if sum(map(len, words)) != len(text):
            return None  # a stretch no alternative matched: the library keeps it, findall not
        known = self._known
        try:
            return sum(map(known.__getitem__, words))
        except KeyError:
            pass
        n = 0
        for word in words:
            found = known.get(word)
            if found is None:
                found = len(self._tokenize(word.translate(_BYTE_CHARS)))
                if len(word) <= _LONGEST_KEPT:
                    if len(known) >= KEPT:
                        known.clear()
                    known[word] = found
            n += found
        return n
