"""tokenizer_for / template_for: loading once per tokenizer folder, and clear errors when unconfigured."""

from pathlib import Path

import pytest

from gateway import adapters
from gateway import config as cfg
from gateway.adapters import ChatTemplate, Tokenizer, template_for, tokenizer_for
from gateway.codec.contract import BackendView
from gateway.dialects.registry import get as get_dialect
from gateway.neutral.errors import Kind, Unsupported
from gateway.proxy.routing import build_backend
from tests.tokenizer_kit import build_tokenizer_folder, tokenizer_folder_fixture  # noqa: F401


@pytest.fixture(autouse=True)
def empty_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with nothing loaded (the caches are per process, by folder)."""
    monkeypatch.setattr(adapters, "_tokenizers", {})
    monkeypatch.setattr(adapters, "_templates", {})


def backend(tokenizer: str | None, name: str = "mindie-a") -> BackendView:
    conf = cfg.Backend(dialect="openai", url="http://127.0.0.1:9", tokenizer=tokenizer)
    return build_backend(name, conf, get_dialect("openai")).view


def test_loaded_once_and_cached(tokenizer_folder: str) -> None:
    b = backend(tokenizer_folder)
    tok = tokenizer_for(b)
    assert isinstance(tok, Tokenizer)
    assert tokenizer_for(b) is tok
    assert adapters._tokenizers[tokenizer_folder] is tok
    tpl = template_for(b)
    assert isinstance(tpl, ChatTemplate)
    assert template_for(b) is tpl
    assert adapters._templates[tokenizer_folder] is tpl
    # The cache is by folder: another backend with the same folder shares the loaded files.
    other = backend(tokenizer_folder, name="mindie-b")
    assert tokenizer_for(other) is tok
    assert template_for(other) is tpl


@pytest.mark.parametrize("lookup", [tokenizer_for, template_for])
def test_not_configured(lookup: object) -> None:
    with pytest.raises(Unsupported) as e:
        lookup(backend(None))  # type: ignore[operator]
    err = e.value
    assert err.status == 400
    assert err.kind is Kind.UNSUPPORTED
    assert "'mindie-a'" in err.message
    assert "`tokenizer:`" in err.message
    assert "tokenizer.json" in err.message


def test_folder_without_files(tmp_path: Path) -> None:
    with pytest.raises(Unsupported) as e:
        tokenizer_for(backend(str(tmp_path)))
    assert e.value.status == 400
    assert "'mindie-a'" in e.value.message
    assert "`tokenizer:`" in e.value.message
    # The server's file layout stays out of the client's error.
    assert str(tmp_path) not in e.value.message


def test_folder_without_chat_template(tmp_path: Path) -> None:
    folder = build_tokenizer_folder(tmp_path, chat_template=None)
    b = backend(folder)
    assert isinstance(tokenizer_for(b), Tokenizer)
    with pytest.raises(Unsupported) as e:
        template_for(b)
    assert e.value.status == 400
    assert "'mindie-a'" in e.value.message
    assert "chat template" in e.value.message
    assert folder not in adapters._templates


def test_template_that_does_not_compile(tmp_path: Path) -> None:
    b = backend(build_tokenizer_folder(tmp_path, chat_template="{% for m in messages %}"))
    with pytest.raises(Unsupported, match="no usable chat template"):
        template_for(b)
