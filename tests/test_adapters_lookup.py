"""tokenizer_for / template_for: loading once per backend, and clear errors when unconfigured."""

from pathlib import Path

import pytest

from gateway import config as cfg
from gateway.adapters import ChatTemplate, Tokenizer, template_for, tokenizer_for
from gateway.core.errors import Kind, Unsupported
from gateway.core.routing import Backend
from gateway.dialects import get as get_dialect
from tests.tokenizer_kit import build_tokenizer_folder, tokenizer_folder_fixture  # noqa: F401


def backend(tokenizer: str | None, name: str = "mindie-a") -> Backend:
    d = get_dialect("openai")
    conf = cfg.Backend(dialect="openai", url="http://127.0.0.1:9", tokenizer=tokenizer)
    return Backend(name, conf, d, d.outbound.options_model(), ["http://127.0.0.1:9"], {})


def test_loaded_once_and_cached(tokenizer_folder: str) -> None:
    b = backend(tokenizer_folder)
    tok = tokenizer_for(b)
    assert isinstance(tok, Tokenizer)
    assert tokenizer_for(b) is tok
    assert b.extras["tokenizer"] is tok
    tpl = template_for(b)
    assert isinstance(tpl, ChatTemplate)
    assert template_for(b) is tpl


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
    b = backend(build_tokenizer_folder(tmp_path, chat_template=None))
    assert isinstance(tokenizer_for(b), Tokenizer)
    with pytest.raises(Unsupported) as e:
        template_for(b)
    assert e.value.status == 400
    assert "'mindie-a'" in e.value.message
    assert "chat template" in e.value.message
    assert "chat_template" not in b.extras


def test_template_that_does_not_compile(tmp_path: Path) -> None:
    b = backend(build_tokenizer_folder(tmp_path, chat_template="{% for m in messages %}"))
    with pytest.raises(Unsupported, match="no usable chat template"):
        template_for(b)
