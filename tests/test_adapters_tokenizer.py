"""The tokenizer adapter against a real (small, locally trained) BPE tokenizer."""

import json
from pathlib import Path

import pytest

from gateway.adapters import IncrementalDetokenizer, Tokenizer
from tests.tokenizer_kit import build_tokenizer_folder, tokenizer_folder_fixture  # noqa: F401

MULTIBYTE = "héllo wörld 你好 🙂 Hello 👍🏽 猫 Ærø"


@pytest.fixture(scope="module")
def tok(tokenizer_folder: str) -> Tokenizer:
    return Tokenizer.load(tokenizer_folder)


def test_special_tokens_come_from_tokenizer_config(tok: Tokenizer) -> None:
    assert tok.bos_token == "<|bos|>"
    # eos_token is written as an AddedToken dict in the kit's config.
    assert tok.eos_token == "<|eos|>"
    assert tok.eos_token_id == tok.token_to_id("<|eos|>")
    assert tok.eos_token_id is not None


def test_round_trip_of_multibyte_text(tok: Tokenizer) -> None:
    ids = tok.encode(MULTIBYTE)
    assert tok.decode(ids) == MULTIBYTE
    assert tok.count(MULTIBYTE) == len(ids)
    # Byte-level BPE: the CJK and emoji characters need more than one token each somewhere.
    assert any("\ufffd" in tok.decode([i]) for i in ids)


def test_special_tokens_encode_as_one_id_and_are_skipped_on_decode(tok: Tokenizer) -> None:
    ids = tok.encode("<|im_start|>hi<|im_end|>")
    assert ids[0] == tok.token_to_id("<|im_start|>")
    assert ids[-1] == tok.token_to_id("<|im_end|>")
    assert tok.decode(ids) == "hi"
    assert tok.decode(ids, skip_special_tokens=False) == "<|im_start|>hi<|im_end|>"


def test_add_special_tokens_flag_is_passed_through(tok: Tokenizer) -> None:
    # The kit's tokenizer has no post-processor, so both forms agree; the call must accept the flag.
    assert tok.encode("hi", add_special_tokens=True) == tok.encode("hi")


def _stream(tok: Tokenizer, ids: list[int], step: int = 1, skip: bool = True) -> list[str]:
    det = IncrementalDetokenizer(tok, skip_special_tokens=skip)
    pieces = [det.feed(ids[i : i + step]) for i in range(0, len(ids), step)]
    pieces.append(det.flush())
    return pieces


@pytest.mark.parametrize("step", [1, 2, 3])
def test_incremental_equals_full_decode_and_never_splits_a_character(tok: Tokenizer, step: int) -> None:
    ids = tok.encode(MULTIBYTE)
    pieces = _stream(tok, ids, step)
    assert "".join(pieces) == tok.decode(ids) == MULTIBYTE
    assert all("\ufffd" not in p for p in pieces)


def test_incremental_emits_each_character_as_soon_as_it_is_complete(tok: Tokenizer) -> None:
    text = "🙂你好"
    ids = tok.encode(text)
    pieces = [p for p in _stream(tok, ids) if p]
    # Every non-empty piece is whole characters, and nothing is held back to the end.
    assert "".join(pieces) == text
    det = IncrementalDetokenizer(tok)
    got = "".join(det.feed([i]) for i in ids)
    assert got == text
    assert det.flush() == ""


def test_incremental_skips_special_tokens(tok: Tokenizer) -> None:
    ids = tok.encode("<|im_start|>assistant\n你好 🙂<|im_end|>")
    assert "".join(_stream(tok, ids)) == "assistant\n你好 🙂"
    assert "".join(_stream(tok, ids, skip=False)) == "<|im_start|>assistant\n你好 🙂<|im_end|>"


def test_flush_releases_an_incomplete_character(tok: Tokenizer) -> None:
    ids = tok.encode("🙂")
    assert len(ids) > 1
    det = IncrementalDetokenizer(tok)
    assert det.feed(ids[:-1]) == ""
    held = det.flush()
    assert held == tok.decode(ids[:-1])
    assert held.endswith("\ufffd")
    assert det.flush() == ""


def test_empty_feed_and_flush(tok: Tokenizer) -> None:
    det = IncrementalDetokenizer(tok)
    assert det.feed([]) == ""
    assert det.flush() == ""


def test_load_without_tokenizer_json(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Tokenizer.load(str(tmp_path))


def test_added_special_tokens_from_config(tmp_path: Path) -> None:
    folder = build_tokenizer_folder(
        tmp_path,
        added_tokens_decoder={"900": {"content": "<|tool|>", "special": True}},
        additional_special_tokens=["<|extra|>"],
    )
    tok = Tokenizer.load(folder)
    assert len(tok.encode("<|tool|>")) == 1
    assert len(tok.encode("<|extra|>")) == 1
    assert tok.decode(tok.encode("a<|tool|>b<|extra|>")) == "ab"
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert cfg["bos_token"] == "<|bos|>"


def test_incremental_with_a_sentencepiece_style_decoder() -> None:
    # Word-start markers become spaces only in context, and the decoder strips the first one:
    # token-by-token decoding would lose every space; the windowed decode must not.
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from tests.tokenizer_kit import CORPUS

    inner = HFTokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    inner.pre_tokenizer = pre_tokenizers.Metaspace()
    inner.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    inner.train_from_iterator(
        CORPUS * 3, trainer=trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False)
    )
    tok = Tokenizer(inner, {"eos_token": "</s>"})
    assert tok.eos_token_id == inner.token_to_id("</s>")
    text = "Hello world how are you 你好 🙂"
    ids = tok.encode(text)
    pieces = _stream(tok, ids)
    assert "".join(pieces) == tok.decode(ids) == text
    assert all("\ufffd" not in p for p in pieces)
