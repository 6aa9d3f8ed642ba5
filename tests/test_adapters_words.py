"""Word-by-word token counts (gateway.adapters.words) against the tokenizer library's own count,
for the pre-tokenizers current models ship (GPT-2's byte-level expression, Llama 3's and Qwen 2's
split expressions) and for those the counter must leave to the library."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from gateway.adapters.tokenizer import Tokenizer
from gateway.adapters.words import LLAMA3, LONGEST, QWEN2, WordCounter, ascii_expression
from tests.tokenizer_kit import CORPUS, SPECIAL_TOKENS

TEXTS = [
    *CORPUS,
    "It's 12345 o'clock; THEY'LL say 'Yes'.\n\n\tIndented   three\r\nlines ",
    "",
    " ",
    "\n",
    "x" * 300,
]


def _trained(pre: pre_tokenizers.PreTokenizer, normalizer: normalizers.Normalizer | None = None) -> HFTokenizer:
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    if normalizer is not None:
        tok.normalizer = normalizer
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 4 + [string.printable * 3], trainer=trainer)
    return tok


def _tokenizer(tmp_path: Path, inner: HFTokenizer) -> Tokenizer:
    inner.save(str(tmp_path / "tokenizer.json"))
    return Tokenizer.load(str(tmp_path))


def _random_texts(seed: int, n: int) -> list[str]:
    rnd = random.Random(seed)
    pieces = ["'s", "'S", "'ll", "'T", " 12", "345678", "  ", "\n\n", "\r\n", "\t", "...", "?!", "Hello", " world"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rnd.randint(1, 12)):
            if rnd.random() < 0.5:
                parts.append(rnd.choice(pieces))
            else:
                parts.append("".join(rnd.choice(string.printable) for _ in range(rnd.randint(1, 8))))
        out.append("".join(parts))
    return out


def _spaced_texts(seed: int, n: int) -> list[str]:
    """Texts whose only whitespace is single spaces, as a model's answer mostly is: words,
    numbers, contractions and punctuation between them, a space before the text or not."""
    rnd = random.Random(seed)
    pieces = ["'s", "'S", "'ll", "don't", "12", "345678", "...", "?!", "Hello", "world", "(x)", "a-b", "I'M"]
    visible = string.ascii_letters + string.digits + string.punctuation
    out = []
    for _ in range(n):
        words = []
        for _ in range(rnd.randint(1, 30)):
            if rnd.random() < 0.5:
                words.append(rnd.choice(pieces))
            else:
                words.append("".join(rnd.choice(visible) for _ in range(rnd.randint(1, 6))))
        out.append((" " if rnd.random() < 0.5 else "") + " ".join(words))
    return out


PRE_TOKENIZERS = {
    "gpt2": lambda: pre_tokenizers.ByteLevel(add_prefix_space=False),
    "gpt2-prefix-space": lambda: pre_tokenizers.ByteLevel(add_prefix_space=True),
    "llama3": lambda: pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    ),
    "qwen2": lambda: pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    ),
}


@pytest.mark.parametrize("kind", sorted(PRE_TOKENIZERS))
def test_counts_equal_the_librarys(tmp_path: Path, kind: str) -> None:
    tok = _tokenizer(tmp_path, _trained(PRE_TOKENIZERS[kind]()))
    assert tok._words is not None, "the counter should follow this pre-tokenizer"
    texts = TEXTS + _random_texts(hash(kind) & 0xFFFF, 3000)
    for text in texts:
        assert tok.count(text) == len(tok.encode(text)), repr(text)
    # Counted twice (the second time from remembered words), the same.
    for text in texts[:200]:
        assert tok.count(text) == len(tok.encode(text)), repr(text)


@pytest.mark.parametrize("kind", sorted(PRE_TOKENIZERS))
def test_a_text_of_single_spaces_is_counted_by_its_pieces_as_the_library_counts_it(tmp_path: Path, kind: str) -> None:
    tok = _tokenizer(tmp_path, _trained(PRE_TOKENIZERS[kind]()))
    words = tok._words
    assert words is not None and words._spaced is not None, "these expressions cut at every space"
    texts = _spaced_texts(hash(kind) & 0xFFFF, 3000)
    for text in texts + texts[:300]:  # the second time, from the pieces remembered
        assert tok.count(text) == len(tok.encode(text)), repr(text)
    assert words._spaced, "the pieces were counted by the split"


def test_another_expression_is_not_cut_at_its_spaces(tmp_path: Path) -> None:
    # Words that may hold a space after their first character: a text's pieces are not its words.
    pairs = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"[a-z]+ [a-z]+|\s+|[^\s]+"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok = _tokenizer(tmp_path, _trained(pairs))
    words = tok._words
    assert words is not None and words._spaced is None
    for text in _spaced_texts(7, 500):
        assert tok.count(text) == len(tok.encode(text)), repr(text)


def test_texts_it_cannot_count_go_to_the_library(tmp_path: Path) -> None:
    tok = _tokenizer(tmp_path, _trained(PRE_TOKENIZERS["llama3"]()))
    words = tok._words
    assert words is not None
    for text in ["héllo wörld", "a <|im_end|> b", "<|bos|>", "x" * (LONGEST + 1), ""]:
        assert words.count(text) is None
        assert tok.count(text) == len(tok.encode(text))
    assert words.count("plain words") is not None


def test_a_normalizer_that_changes_ascii_or_another_pre_tokenizer_is_left_to_the_library(tmp_path: Path) -> None:
    lower = _trained(PRE_TOKENIZERS["gpt2"](), normalizers.Lowercase())
    assert WordCounter.build(lower, lambda t: len(lower.encode(t).ids)) is None
    nfc = _trained(PRE_TOKENIZERS["gpt2"](), normalizers.NFC())
    assert WordCounter.build(nfc, lambda t: len(nfc.encode(t).ids)) is not None
    meta = _trained(pre_tokenizers.Metaspace())
    assert WordCounter.build(meta, lambda t: len(meta.encode(t).ids)) is None
    whitespace = _trained(pre_tokenizers.Whitespace())
    assert WordCounter.build(whitespace, lambda t: len(whitespace.encode(t).ids)) is None


def test_a_counter_whose_counts_do_not_add_up_is_refused() -> None:
    inner = _trained(PRE_TOKENIZERS["gpt2"]())
    assert WordCounter.build(inner, lambda t: len(inner.encode(t).ids) + 1) is None


def test_expressions_outside_ascii_classes_are_refused() -> None:
    assert ascii_expression(r"\p{Lu}+") is None
    assert ascii_expression(r"\P{L}+") is None
    assert ascii_expression(r"[a[b]]") is None
    found = ascii_expression(r"[^\s\p{L}\p{N}]+|\p{L}+")
    assert found is not None and found.findall("ab, 12") == ["ab", ","]
    brackets = ascii_expression(r"[]a]+")
    assert brackets is not None and brackets.findall("]a]b") == ["]a]"]
