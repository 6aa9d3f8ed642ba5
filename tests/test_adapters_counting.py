"""Prompt counts from remembered stretches equal the tokenizer's own count of the whole text,
and tokenizers whose stretches are not encoded alone are counted whole."""

import random
from pathlib import Path

import pytest
from tokenizers import AddedToken, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from gateway.adapters import Tokenizer, counting
from gateway.adapters.counting import PieceCounter
from tests.tokenizer_kit import CORPUS, SPECIAL_TOKENS, tokenizer_folder_fixture  # noqa: F401

WORDS = ["Hello", " world", "\n", "  ", "你好", "🙂", "café", '{"a": 1}', "user", "assistant\n", " ", "x"]


def _texts(specials: list[str], seed: int = 7, n: int = 300) -> list[str]:
    rng = random.Random(seed)
    texts = ["", " ", "\n\n", "".join(specials), specials[0] * 3, " " + specials[0] + " "]
    for _ in range(n):
        parts = rng.choices(WORDS + specials, k=rng.randint(1, 14))
        texts.append("".join(parts))
    return texts


@pytest.fixture(scope="module")
def tok(tokenizer_folder: str) -> Tokenizer:
    return Tokenizer.load(tokenizer_folder)


def test_the_kit_tokenizer_is_counted_by_stretches(tok: Tokenizer) -> None:
    assert tok._pieces is not None


def test_counts_equal_the_whole_texts_count(tok: Tokenizer) -> None:
    for text in _texts(SPECIAL_TOKENS):
        assert tok.count_prompt(text) == tok.count(text), repr(text)
        assert tok.count_prompt(text) == tok.count(text), repr(text)  # from the remembered counts


def test_a_chat_turn_counts_only_its_new_text(tok: Tokenizer) -> None:
    counted: list[str] = []
    assert tok._pieces is not None

    def count(text: str) -> int:
        counted.append(text)
        return tok.count(text)

    counter = PieceCounter(count, SPECIAL_TOKENS)
    history = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    counter.count(history + "<|im_start|>assistant\n")
    counted.clear()
    turn = history + "<|im_start|>assistant\nParis.<|im_end|>\n<|im_start|>user\nAnd Spain?<|im_end|>\n"
    assert counter.count(turn) == tok.count(turn)
    assert counted == ["assistant\nParis.", "user\nAnd Spain?"]


def test_what_is_remembered_is_bounded(tok: Tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(counting, "CACHE_CHARS", 200)
    monkeypatch.setattr(counting, "LONGEST_CACHED", 50)
    counter = PieceCounter(tok.count, SPECIAL_TOKENS)
    for i in range(100):
        counter.count(f"<|im_start|>message number {i}<|im_end|>")
    assert counter._chars <= 200
    assert sum(map(len, counter._known)) == counter._chars
    long = "a long stretch " * 10
    assert counter.count(long) == tok.count(long)
    assert long not in counter._known

    monkeypatch.setattr(counting, "CACHE_CHARS", 10_000)
    monkeypatch.setattr(counting, "CACHE_ENTRIES", 10)
    for i in range(100):
        counter.count(f"<|im_start|>{i}<|im_end|>")
    assert len(counter._known) == 10 and counter._chars == sum(map(len, counter._known))


def _trained(pre: pre_tokenizers.PreTokenizer | None, normalizer: normalizers.Normalizer | None = None) -> HFTokenizer:
    inner = HFTokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    if pre is not None:
        inner.pre_tokenizer = pre
    if normalizer is not None:
        inner.normalizer = normalizer
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    inner.train_from_iterator(
        CORPUS * 3, trainer=trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False)
    )
    return inner


def test_sentencepiece_style_tokenizers_agree_too() -> None:
    # A word-start mark before every stretch (Metaspace "always", or the older Prepend normalizer).
    for pre, norm in (
        (pre_tokenizers.Metaspace(prepend_scheme="always"), None),
        (None, normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])),
    ):
        tok = Tokenizer(_trained(pre, norm), {"eos_token": "</s>"})
        assert tok._pieces is not None
        for text in _texts(["<s>", "</s>"], seed=3, n=150):
            assert tok.count_prompt(text) == tok.count(text), repr(text)


def test_a_first_stretch_marked_alone_is_counted_whole() -> None:
    # Metaspace "first" marks a word start only at the very beginning of the text: a stretch
    # after a special token is encoded differently from the same text alone.
    tok = Tokenizer(_trained(pre_tokenizers.Metaspace(prepend_scheme="first")), {"eos_token": "</s>"})
    assert tok._pieces is None
    text = "<s>Hello world</s> how are you"
    assert tok.count_prompt(text) == tok.count(text)


@pytest.mark.parametrize(
    "token",
    [
        AddedToken("<|x|>", rstrip=True, special=True),
        AddedToken("<|x|>", lstrip=True, special=True),
        AddedToken("<|x|>", single_word=True, special=True),
        AddedToken("<|x|>", normalized=True, special=False),
    ],
)
def test_added_tokens_that_reach_beyond_themselves_are_counted_whole(token: AddedToken) -> None:
    inner = _trained(pre_tokenizers.Metaspace(prepend_scheme="always"))
    inner.add_tokens([token])
    tok = Tokenizer(inner, {"eos_token": "</s>"})
    assert tok._pieces is None
    text = "Hello <|x|>  world"
    assert tok.count_prompt(text) == tok.count(text)


def test_padding_and_truncation_in_tokenizer_json_do_not_change_counts(tmp_path: Path, tokenizer_folder: str) -> None:
    inner = HFTokenizer.from_file(str(Path(tokenizer_folder) / "tokenizer.json"))
    inner.enable_padding(length=64, pad_token="<|eos|>")
    inner.enable_truncation(max_length=3)
    inner.save(str(tmp_path / "tokenizer.json"))
    tok = Tokenizer.load(str(tmp_path))
    text = "Hello world, how are you today?"
    assert tok.count(text) == len(tok.encode(text)) > 3
    assert len(tok.encode(text)) < 64
