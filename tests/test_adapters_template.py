"""Chat template rendering: exact prompts, rendered the way transformers renders them."""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gateway.adapters import ChatTemplate
from gateway.neutral.errors import InvalidRequest
from gateway.neutral.types import Message
from tests.tokenizer_kit import build_tokenizer_folder, tokenizer_folder_fixture  # noqa: F401

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a <city> & région",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def chatml(tokenizer_folder: str) -> ChatTemplate:
    return ChatTemplate.load(tokenizer_folder)


def test_system_user_with_generation_prompt(chatml: ChatTemplate) -> None:
    out = chatml.render([Message("system", "You are terse."), Message("user", "Hi there")])
    assert out == (
        "<|bos|><|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_without_generation_prompt(chatml: ChatTemplate) -> None:
    out = chatml.render([Message("user", "Hi")], add_generation_prompt=False)
    assert out == "<|bos|><|im_start|>user\nHi<|im_end|>\n"


def test_enable_thinking_kwarg(chatml: ChatTemplate) -> None:
    msgs = [Message("user", "Hi")]
    off = chatml.render(msgs, enable_thinking=False)
    assert off == "<|bos|><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert chatml.render(msgs, enable_thinking=True) == "<|bos|><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert chatml.render(msgs) == chatml.render(msgs, enable_thinking=True)


def test_tools_and_tool_round_trip(chatml: ChatTemplate) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'}}
    msgs = [
        Message("system", "Be brief."),
        Message("user", "Weather in Zürich?"),
        Message("assistant", None, tool_calls=[call]),
        Message("tool", "12°C <sunny>", tool_call_id="call_1"),
    ]
    out = chatml.render(msgs, tools=[WEATHER_TOOL])
    tool_json = (
        '{"type": "function", "function": {"name": "get_weather", "description": "Weather for a <city> & région", '
        '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}'
    )
    assert out == (
        "<|bos|><|im_start|>system\nBe brief.\n\n# Tools\n<tools>\n" + tool_json + "\n</tools><|im_end|>\n"
        "<|im_start|>user\nWeather in Zürich?<|im_end|>\n"
        # The OpenAI arguments string reaches the template as an object, as vLLM hands it over.
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>'
        "<|im_end|>\n"
        '<|im_start|>tool\n<tool_response id="call_1">\n12°C <sunny>\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n"
    )


def test_tool_call_arguments_that_are_not_an_object_stay_a_string(chatml: ChatTemplate) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "not json"}}
    out = chatml.render(
        [Message("user", "x"), Message("assistant", "", tool_calls=[call])], add_generation_prompt=False
    )
    assert '{"name": "f", "arguments": "not json"}' in out


def test_assistant_reasoning_and_list_content(chatml: ChatTemplate) -> None:
    msgs = [
        Message(
            "user",
            [
                {"type": "text", "text": "Part one, "},
                {"type": "image_url", "image_url": {"url": "x"}},
                {"type": "text", "text": "part two"},
            ],
        ),
        Message("assistant", "Answer", reasoning_content="Thinking..."),
        Message("user", "Again"),
    ]
    out = chatml.render(msgs)
    assert out == (
        "<|bos|><|im_start|>user\nPart one, part two<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nThinking...\n</think>\n\nAnswer<|im_end|>\n"
        "<|im_start|>user\nAgain<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_list_content_is_joined_for_templates_that_expect_a_string(tmp_path: Path) -> None:
    tpl = "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}\n{% endfor %}"
    ct = ChatTemplate.load(build_tokenizer_folder(tmp_path, chat_template=tpl))
    out = ct.render([Message("user", [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])])
    assert out == "[user]a\nb\n"


def test_raise_exception_gives_invalid_request(chatml: ChatTemplate) -> None:
    with pytest.raises(InvalidRequest) as e:
        chatml.render([Message("user", "x"), Message("system", "late")])
    assert e.value.status == 400
    assert "system message must come first" in e.value.message
    with pytest.raises(InvalidRequest, match="unknown role: narrator"):
        chatml.render([Message("narrator", "x")])


def test_transformers_environment(tmp_path: Path) -> None:
    tpl = (
        "{% for m in messages %}\n"
        "  {% if loop.index > 1 %}{% break %}{% endif %}\n"
        "  {{ m | tojson }}|{{ m | tojson(indent=1) }}\n"
        "{% endfor %}\n"
        "{% generation %}{{ strftime_now('%Y') }}{% endgeneration %}|{{ bos_token }}|{{ eos_token }}"
    )
    ct = ChatTemplate.load(build_tokenizer_folder(tmp_path, chat_template=tpl))
    out = ct.render([Message("user", "<é>"), Message("user", "second")])
    # trim_blocks/lstrip_blocks remove the block-tag lines (not the indent before `{{`); tojson keeps <, > and é.
    m = re.fullmatch(
        r'  \{"role": "user", "content": "<é>"\}\|\{\n "role": "user",\n "content": "<é>"\n\}\n'
        r"(\d{4})\|<\|bos\|>\|<\|eos\|>",
        out,
    )
    assert m is not None, out


def test_sandbox_blocks_unsafe_access(tmp_path: Path) -> None:
    tpl = "{{ messages.__class__.__mro__ }}"
    ct = ChatTemplate.load(build_tokenizer_folder(tmp_path, chat_template=tpl))
    with pytest.raises(InvalidRequest):
        ct.render([Message("user", "x")])


def test_named_templates_pick_tool_use_when_tools_are_given(tmp_path: Path) -> None:
    templates = [
        {"name": "default", "template": "plain:{{ messages[0].content }}"},
        {"name": "tool_use", "template": "tools:{{ tools | length }}:{{ messages[0].content }}"},
    ]
    ct = ChatTemplate.load(build_tokenizer_folder(tmp_path, chat_template=templates))
    assert ct.render([Message("user", "q")]) == "plain:q"
    assert ct.render([Message("user", "q")], tools=[WEATHER_TOOL]) == "tools:1:q"


def test_chat_template_jinja_file_wins(tmp_path: Path) -> None:
    folder = build_tokenizer_folder(tmp_path, chat_template="from config")
    (tmp_path / "chat_template.jinja").write_text("from file {{ messages | length }}", encoding="utf-8")
    assert ChatTemplate.load(folder).render([Message("user", "x")]) == "from file 1"


def test_no_template(tmp_path: Path) -> None:
    folder = build_tokenizer_folder(tmp_path, chat_template=None)
    assert "chat_template" not in json.loads((tmp_path / "tokenizer_config.json").read_text())
    with pytest.raises(FileNotFoundError):
        ChatTemplate.load(folder)


def test_attribute_reads_on_dicts_render_as_the_stock_sandbox_does() -> None:
    # The quick path for `message.role` must give what jinja's own sandbox gives: keys that are
    # not dict methods, methods that shadow keys, missing keys as undefined, other objects as is.
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from gateway.adapters.template import _ENV

    source = (
        "{{ m.role }}|{{ m.missing is defined }}|{{ m.items is callable }}|{{ m.get('role') }}|"
        "{{ m.nested.deep }}|{{ m.nested.none is none }}|{{ s.upper() }}|{{ l.0 }}|"
        "{% for k, v in m.items() %}{{ k }}{% endfor %}|{{ m.missing or 'none' }}"
    )
    values = {"m": {"role": "user", "items": 3, "nested": {"deep": 1, "none": None}}, "s": "ab", "l": [5]}
    stock = ImmutableSandboxedEnvironment().from_string(source).render(**values)
    assert _ENV.from_string(source).render(**values) == stock
    assert stock == "user|False|True|user|1|True|AB|5|roleitemsnested|none"
