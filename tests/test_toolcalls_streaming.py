"""Tool calls read from a stream: text passes at once but for what may still become a call,
a call's name goes out as soon as it is read and its arguments as they come (or the call whole,
when asked), and a malformed call never raises: it comes back as text, or, once its name went
out, ends where it broke; either way it is counted."""

import json
import random
import re

import pytest

from gateway.adapters.toolcalls import Parsed, ToolCall, get_parser
from gateway.neutral.events import TextDelta, ToolCallDelta
from tests.support import counting_ids, read_in_pieces
from tests.test_toolcalls_formats import WEATHER, WRITE, assert_split_free


def stream(fmt: str, tools=None, **options):
    return get_parser(fmt).stream(tools, ids=counting_ids(), **options)


def test_plain_text_passes_at_once_but_for_what_may_start_a_call():
    s = stream("hermes")
    assert s.feed("Hello wor") == [TextDelta("Hello wor")]
    assert s.feed("ld <tool") == [TextDelta("ld")]  # " <tool" may become "<tool_call>"
    assert s.feed("kit") == [TextDelta(" <toolkit")]
    assert s.feed("\n\n") == []  # whitespace waits: it goes if a call follows
    assert s.feed("Bye") == [TextDelta("\n\nBye")]
    assert s.feed(" ") == []
    assert s.close() == [TextDelta(" ")]  # no call came: the text is given back exactly


def test_whitespace_between_text_and_calls_is_dropped():
    s = stream("hermes")
    out = s.feed("Checking.\n\n<tool_call>")
    out += s.feed('{"name": "f", "arguments": {}}</tool_call>\n')
    out += s.feed("\n") + s.close()
    assert out == [TextDelta("Checking."), ToolCallDelta(0, "call_0", "f", "{}")]


def test_a_call_name_goes_out_once_read_and_its_arguments_as_they_come():
    s = stream("hermes", [WEATHER])
    assert s.feed("<tool_call>\n") == []
    assert s.feed('{"name": "get_current_weather", "argu') == [ToolCallDelta(0, "call_0", "get_current_weather", "")]
    assert s.feed('ments": {"city": "San Fr') == [ToolCallDelta(0, arguments='{"city":"San Fr')]
    assert s.feed('ancisco", "unit": "celsius"}}\n</tool') == [ToolCallDelta(0, arguments='ancisco","unit":"celsius"}')]
    assert s.feed("_call>") == []
    assert s.close() == []
    assert (s.calls, s.failures) == (1, 0)


def test_a_long_string_argument_streams_before_its_value_ends():
    s = stream("qwen3_coder", [WRITE])
    out = s.feed("<tool_call>\n<function=write_file>\n<parameter=content>\nline one\nline t")
    assert out == [ToolCallDelta(0, "call_0", "write_file", '{"content":"line one\\nline t')]
    assert s.feed("wo\n</para") == [ToolCallDelta(0, arguments="wo")]  # the newline may be the markup's
    assert s.feed("meter>\n</function>\n</tool_call>") == [ToolCallDelta(0, arguments='"}')]


def test_pythonic_arguments_go_out_one_by_one_the_name_with_the_first():
    s = stream("pythonic")
    assert s.feed("[get_weather(city='Par") == []
    assert s.feed("is', days=3") == [ToolCallDelta(0, "call_0", "get_weather", '{"city":"Paris"')]
    assert s.feed(")]") == [ToolCallDelta(0, arguments=',"days":3}')]


def test_whole_calls_go_out_in_one_delta_once_complete():
    s = stream("hermes", whole_calls=True)
    assert s.feed('<tool_call>{"name": "f", "arguments": {"a": [1, ') == []
    assert s.feed("2]}}</tool_call>") == [ToolCallDelta(0, "call_0", "f", '{"a":[1,2]}')]


def test_call_ids_are_in_openai_form_and_nine_characters_for_mistral():
    hermes = get_parser("hermes").parse('<tool_call>{"name": "f", "arguments": {}}</tool_call>')
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", hermes.calls[0].id)
    mistral = get_parser("mistral").parse('[TOOL_CALLS][{"name": "f", "arguments": {}}, {"name": "g"}]')
    assert [len(c.id) for c in mistral.calls] == [9, 9]
    assert all(c.id.isalnum() for c in mistral.calls)
    assert mistral.calls[0].id != mistral.calls[1].id


# (format, answer, tools, what a whole-calls reading gives, what a streamed reading gives)
MALFORMED = [
    (  # bad JSON: the object never closes
        "hermes",
        '<tool_call>\n{"name": "final_answer", "arguments": {"trigger": true}',
        None,
        None,
        Parsed("", [ToolCall("call_0", "final_answer", '{"trigger":true}')], 1),
    ),
    (  # a tool the request does not have: never sent
        "hermes",
        'Sure.\n<tool_call>\n{"name": "rm_rf", "arguments": {"path": "/"}}\n</tool_call>',
        [WEATHER],
        None,
        None,
    ),
    (  # an opening tag and no call; a good call after it still counts
        "hermes",
        '<tool_call>\nI should call a tool here.\n<tool_call>{"name": "f", "arguments": {}}</tool_call>',
        None,
        Parsed("<tool_call>\nI should call a tool here.", [ToolCall("call_0", "f", "{}")], 1),
        None,
    ),
    (  # text after the object, before the closing tag
        "hermes",
        '<tool_call>{"name": "f", "arguments": {"a": 1}} oops</tool_call>',
        None,
        None,
        Parsed("oops</tool_call>", [ToolCall("call_0", "f", '{"a":1}')], 1),
    ),
    (  # cut off in the middle of the arguments (max_tokens)
        "hermes",
        'Let me see.<tool_call>\n{"name": "get_current_weather", "arguments": {"city": "San Fr',
        [WEATHER],
        None,
        Parsed("Let me see.", [ToolCall("call_0", "get_current_weather", '{"city":"San Fr')], 1),
    ),
    (  # an object without a name is no call (and no malformed one); a cut-off call is
        "llama3_json",
        '{"parameters": {}} and {"name": "x", "arguments": [1,',
        None,
        None,
        Parsed('{"parameters": {}} and', [ToolCall("call_0", "x", "[1,")], 1),
    ),
    ("llama3_json", '{"name": "invalidTool", "parameters": {invalid json}', [WEATHER], None, None),
    ("mistral", "[TOOL_CALLS] not json at all", None, None, None),
    (  # the list goes wrong after a good call, which stands
        "mistral",
        '[TOOL_CALLS][{"name": "f", "arguments": {}}, 42]',
        None,
        Parsed(", 42]", [ToolCall("call_0", "f", "{}")], 1),
        None,
    ),
    ("pythonic", "[get_weather(city=SF)]", None, None, None),  # a call goes out with its first argument
    ("pythonic", "[get_weather('SF')]", None, None, None),
    ("pythonic", "[foo(x=1])]", None, None, None),
    ("pythonic", "[bad(x=b'z'), get_weather(city='SF')]", None, None, None),
    ("pythonic", "[calc(x=1e999)]", None, None, None),
    ("pythonic", "[f(a=1, a=2)]", None, None, Parsed("=2)]", [ToolCall("call_0", "f", '{"a":1')], 1)),
    (
        "qwen3_coder",
        "<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>",
        [WEATHER],
        None,
        None,
    ),
    ("qwen3_coder", "<tool_call>\nno function here\n</tool_call>", None, None, None),
    (
        "qwen3_coder",
        "<tool_call>\n<function=write_file>\n<parameter=content>\nprint('hi')\nprint('unfin",
        [WRITE],
        None,
        Parsed("", [ToolCall("call_0", "write_file", "{\"content\":\"print('hi')\\nprint('unfin")], 1),
    ),
]


@pytest.mark.parametrize(
    "fmt, answer, tools, whole, streamed", MALFORMED, ids=[f"{m[0]}-{m[1][:30]!r}" for m in MALFORMED]
)
def test_a_malformed_call_comes_back_as_text_and_is_counted(fmt, answer, tools, whole, streamed):
    parser = get_parser(fmt)
    as_text = Parsed(answer, [], 1)
    assert parser.parse(answer, tools, ids=counting_ids(), whole_calls=True) == (whole or as_text)
    assert parser.parse(answer, tools, ids=counting_ids(), whole_calls=False) == (streamed or whole or as_text)
    for whole_calls in (True, False):
        assert_split_free(fmt, answer, tools, whole_calls=whole_calls)


FUZZ_PIECES = {
    "hermes": ["<tool_call>", "</tool_call>", '{"name": "f"', '{"name": "g"', ', "arguments": ', "{", "}", '"x"', "\n"],
    "llama3_json": ["<|python_tag|>", '{"name": "f"', '{"name": "g"', ', "parameters": ', "{", "}", ";", " ", "[1]"],
    "mistral": ["[TOOL_CALLS]", "[", "]", "f", "g", "[ARGS]", '{"name": "f"', ', "arguments": ', "{", "}", ",", " "],
    "pythonic": ["[", "]", "f(", "g(", ")", "a=", "'x'", "1", ", ", "<|python_start|>", "<|python_end|>", '"""', "\\"],
    "qwen3_coder": ["<tool_call>", "</tool_call>", "<function=f>", "<function=g>", "</function>", "<parameter=a>",
                    "</parameter>", "\n", "v", "<"],
}  # fmt: skip


@pytest.mark.parametrize("fmt", sorted(FUZZ_PIECES))
def test_no_text_makes_a_reader_raise_or_depend_on_its_splits(fmt):
    """Random answers built from the format's own pieces (`g` is no tool of the request):
    whatever they hold, nothing raises and the stream gives what the whole reading gives."""
    parser, tools = get_parser(fmt), [{"type": "function", "function": {"name": "f"}}]
    rng = random.Random(fmt)
    for _ in range(150):
        answer = "".join(rng.choice(FUZZ_PIECES[fmt]) for _ in range(rng.randint(1, 14)))
        for whole_calls in (True, False):
            whole = parser.parse(answer, tools, ids=counting_ids(), whole_calls=whole_calls)
            cuts = sorted(rng.sample(range(len(answer) + 1), min(len(answer) + 1, rng.randint(1, 6))))
            pieces = [answer[a:b] for a, b in zip([0, *cuts], [*cuts, len(answer)], strict=True)]
            assert read_in_pieces(parser, pieces, tools, whole_calls=whole_calls) == whole, pieces
            if whole_calls and not whole.calls:  # nothing was a call: all of it is text
                assert whole.content == answer


def test_escapes_of_lone_surrogates_never_reach_the_client_unescaped():
    """A model can write half a surrogate pair as a JSON or Python escape; no UTF-8 text can
    carry one, so whatever goes out keeps it escaped (or refuses it as a name)."""
    answers = [
        (
            "hermes",
            '<tool_call>{"name": "f", "arguments": "{\\"a\\": \\"x\\ud800\\"}"}</tool_call>',
            [{"a": "x\ud800"}],
        ),
        ("hermes", '<tool_call>{"name": "\\udc00", "arguments": {}}</tool_call>', []),
        ("pythonic", r"[f(a='x\ud800', b={'\udfff': 1})]", [{"a": "x\ud800", "b": {"\udfff": 1}}]),
        ("qwen3_coder", '<function=f>\n<parameter=a>\n["\\ud800"]\n</parameter>\n</function>', [{"a": ["\ud800"]}]),
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": {"type": "array"}}}}}]
    for fmt, answer, arguments in answers:
        for whole_calls in (True, False):
            got = get_parser(fmt).parse(answer, tools, whole_calls=whole_calls)
            for text in [got.content] + [c.name + c.arguments for c in got.calls]:
                text.encode("utf-8")
            assert [json.loads(c.arguments) for c in got.calls] == arguments


@pytest.mark.parametrize("fmt", ["hermes", "mistral", "pythonic", "llama3_json"])
def test_a_run_that_passes_is_each_text_fed_back_as_it_is(fmt: str) -> None:
    """`passes` (a run of tokens goes on as one event) says yes only where `feed` would give
    every text of the run back whole, one event each: random runs after random openings."""
    rng = random.Random(fmt)
    pieces = ["Hello", " world", " ", "\n", "", "<", "[", "{", "<tool_call>", "x\t", "é", "😀", "TOOL"]
    said = {True: 0, False: 0}
    for _ in range(3000):
        opening = "".join(rng.choices(pieces, k=rng.randint(0, 3)))
        texts = rng.choices(pieces, k=rng.randint(2, 6))
        s = stream(fmt)
        if opening:
            s.feed(opening)
        # What `passes` is to say, asked of each text in turn.
        each = (s._reader is None and not s._tail and not s._start_open and s._texted and not s._ws) and all(
            t and not t[-1].isspace() and not any(c in t for c in s._anywhere) for t in texts
        )
        passes = s.passes(texts)
        assert passes == each, (opening, texts)
        said[passes] += 1
        if passes:
            assert [s.feed(t) for t in texts] == [[TextDelta(t)] for t in texts], (opening, texts)
    assert said[True] > 50 and said[False] > 50, said
