"""A small real tokenizer folder for tests, built offline.

`build_tokenizer_folder(path)` trains a byte-level BPE tokenizer on a tiny built-in corpus
(with accented Latin, CJK and emoji, so multi-byte characters span several tokens) and writes
tokenizer.json plus a tokenizer_config.json with bos/eos tokens and a ChatML-style chat
template that knows tools, reasoning and an `enable_thinking` switch.

Use the session fixture `tokenizer_folder` by importing it explicitly:
    from tests.tokenizer_kit import tokenizer_folder_fixture  # noqa: F401
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"]

CORPUS = [
    "héllo wörld 你好 🙂",
    "Hello world, how are you today? I am fine, thank you.",
    "The quick brown fox jumps over the lazy dog.",
    "Stop words end a generation: STOP, END, ###, </s>.",
    "café naïve façade jalapeño Ærøskøbing straße",
    "你好 世界 今天天气很好 我们去公园散步吧",
    "こんにちは世界 안녕하세요 Привет мир",
    "emoji: 🙂 😀 🚀 👍🏽 🇩🇪 ❤️",
    "def add(a, b):\n    return a + b\n",
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
]

# ChatML with the usual extensions of recent open models: an optional bos token, tools listed in
# the system turn, tool calls and tool results, reasoning in <think> blocks, and an empty think
# block forced when the caller passes enable_thinking=false.
CHAT_TEMPLATE = (
    "{{- bos_token }}\n"
    "{%- if tools %}\n"
    "{{- '<|im_start|>system\\n' }}\n"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}\n"
    "{{- '# Tools\\n<tools>' }}\n"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}\n"
    "{{- '\\n</tools><|im_end|>\\n' }}\n"
    "{%- elif messages[0].role == 'system' %}\n"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "{%- if message.role == 'system' %}\n"
    "{%- if not loop.first %}{{- raise_exception('system message must come first') }}{%- endif %}\n"
    "{%- elif message.role == 'user' %}\n"
    "{{- '<|im_start|>user\\n' }}\n"
    "{%- if message.content is string %}{{- message.content }}\n"
    "{%- else %}{%- for part in message.content %}"
    "{%- if part.type == 'text' %}{{- part.text }}{%- endif %}{%- endfor %}{%- endif %}\n"
    "{{- '<|im_end|>\\n' }}\n"
    "{%- elif message.role == 'assistant' %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- if message.reasoning_content %}"
    "{{- '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' }}{%- endif %}\n"
    "{%- if message.content %}{{- message.content }}{%- endif %}\n"
    "{%- for call in message.tool_calls or [] %}\n"
    "{{- '<tool_call>\\n' + ({'name': call.function.name, 'arguments': call.function.arguments} | tojson)"
    " + '\\n</tool_call>' }}\n"
    "{%- endfor %}\n"
    "{{- '<|im_end|>\\n' }}\n"
    "{%- elif message.role == 'tool' %}\n"
    "{{- '<|im_start|>tool\\n<tool_response id=\"' + message.tool_call_id + '\">\\n'"
    " + message.content + '\\n</tool_response><|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "{{- raise_exception('unknown role: ' + message.role) }}\n"
    "{%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}\n"
    "{%- endif %}\n"
)


def train_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    return tok


def build_tokenizer_folder(path: str | Path, chat_template: Any = CHAT_TEMPLATE, **config: Any) -> str:
    """Write tokenizer.json and tokenizer_config.json into `path`; returns the folder as a string.

    `chat_template` may be a string, a list of {name, template}, or None for no template;
    extra keyword arguments go into tokenizer_config.json as they are.
    """
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    train_tokenizer().save(str(folder / "tokenizer.json"))
    cfg: dict[str, Any] = {
        "bos_token": "<|bos|>",
        "eos_token": {"content": "<|eos|>", "lstrip": False, "rstrip": False, "special": True},
        "pad_token": None,
        "model_max_length": 4096,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    if chat_template is not None:
        cfg["chat_template"] = chat_template
    cfg.update(config)
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=2), encoding="utf-8")
    return str(folder)


@pytest.fixture(scope="session", name="tokenizer_folder")
def tokenizer_folder_fixture(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One tokenizer folder (default ChatML template) shared by the whole test session."""
    return build_tokenizer_folder(tmp_path_factory.mktemp("tokenizer"))
