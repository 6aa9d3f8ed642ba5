"""Tool calls read out of model text, per format, on answers the models write (the samples of
vLLM's own parser tests and the models' chat templates): the text outside calls, the calls with
their arguments as compact JSON, and the same result however the streamed text is split."""

import json
import random

import pytest

from gateway.adapters.toolcalls import Parsed, ToolCall, get_parser
from gateway.adapters.toolcalls.calls import merge
from gateway.adapters.toolcalls.core import Marker
from gateway.adapters.toolcalls.jsoncalls import CallListReader
from gateway.adapters.toolcalls.registry import PARSERS
from tests.support import counting_ids, read_in_pieces

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "state": {"type": "string"},
                "unit": {"type": "string", "enum": ["fahrenheit", "celsius"]},
            },
        },
    },
}
AREA = {
    "type": "function",
    "function": {
        "name": "calculate_area",
        "parameters": {
            "type": "object",
            "properties": {
                "shape": {"type": "string"},
                "dimensions": {"type": "object"},
                "precision": {"type": "integer"},
            },
        },
    },
}
TYPES = {
    "type": "function",
    "function": {
        "name": "test_types",
        "parameters": {
            "type": "object",
            "properties": {
                "int_param": {"type": "integer"},
                "float_param": {"type": "float"},
                "bool_param": {"type": "boolean"},
                "str_param": {"type": "string"},
                "obj_param": {"type": "object"},
                "maybe_int": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "list_param": {"type": ["array", "null"]},
            },
        },
    },
}
WRITE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}},
    },
}


def calls(*pairs: tuple[str, object]) -> list[ToolCall]:
    """Expected calls: ids as `counting_ids` makes them, arguments as the compact JSON of `args`."""
    return [
        ToolCall(f"call_{i}", name, json.dumps(args, ensure_ascii=False, separators=(",", ":")))
        for i, (name, args) in enumerate(pairs)
    ]


# (format, answer, tools, content, calls)
SAMPLES = [
    # Hermes: Qwen2.5 / Qwen3 / Hermes.
    (
        "hermes",
        '<tool_call>\n{"name": "final_answer", "arguments": {"trigger": true}}\n</tool_call>',
        None,
        "",
        calls(("final_answer", {"trigger": True})),
    ),
    (
        "hermes",
        '<tool_call>\n{"name": "get_current_temperature",\n"arguments": {"location":\n'
        '"San Francisco, California, United States", "unit": "celsius"}}\n</tool_call>',
        None,
        "",
        calls(
            (
                "get_current_temperature",
                {"location": "San Francisco, California, United States", "unit": "celsius"},
            )
        ),
    ),
    (
        "hermes",
        'Sure, let me check the weather.<tool_call>{"name": "get_weather", "arguments": {"city": "NYC"}}</tool_call>',
        None,
        "Sure, let me check the weather.",
        calls(("get_weather", {"city": "NYC"})),
    ),
    (
        "hermes",
        '<tool_call>{"name": "search", "arguments": {"q": "cats"}}</tool_call>'
        '<tool_call>{"name": "search", "arguments": {"q": "dogs"}}</tool_call>',
        None,
        "",
        calls(("search", {"q": "cats"}), ("search", {"q": "dogs"})),
    ),
    (
        "hermes",
        "I'll look up both cities for you.\n\n"
        '<tool_call>\n{"name": "get_current_weather", "arguments": {"city": "北京", "unit": "celsius"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_current_weather", "arguments": '
        '{"city": "Zürich 🏔", "note": "line\\nbreak \\u00e9"}}'
        "\n</tool_call>\n\nBoth are on their way.",
        [WEATHER],
        "I'll look up both cities for you.\n\nBoth are on their way.",
        [
            ToolCall("call_0", "get_current_weather", '{"city":"北京","unit":"celsius"}'),
            ToolCall("call_1", "get_current_weather", '{"city":"Zürich 🏔","note":"line\\nbreak \\u00e9"}'),
        ],
    ),
    (
        "hermes",
        '<tool_call>\n{"name": "configure", "arguments": {"db": {"pool": {"size": 10, "hosts": ["a", "b"]}}, '
        '"flags": [true, false, null], "ratio": -1.5e3, "empty": {}}}\n</tool_call>',
        None,
        "",
        [
            ToolCall(
                "call_0",
                "configure",
                '{"db":{"pool":{"size":10,"hosts":["a","b"]}},"flags":[true,false,null],"ratio":-1.5e3,"empty":{}}',
            )
        ],
    ),
    (  # Granite 4 writes its arguments as a JSON string holding the object
        "hermes",
        '<tool_call>\n{"name": "get_db_config", "arguments": "{\\"param\\": \\"max_connections\\"}"}\n</tool_call>',
        None,
        "",
        calls(("get_db_config", {"param": "max_connections"})),
    ),
    (
        "hermes",
        '<tool_call>\n{"name": "do_thing", "arguments": "hello"}\n</tool_call>',
        None,
        "",
        [ToolCall("call_0", "do_thing", '"hello"')],
    ),
    (  # the arguments before the name
        "hermes",
        '<tool_call>\n{"arguments": {"name": "John Doe"}, "name": "get_age"}\n</tool_call>',
        None,
        "",
        calls(("get_age", {"name": "John Doe"})),
    ),
    (  # the object complete, the closing tag never came
        "hermes",
        '<tool_call>\n{"name": "final_answer", "arguments": {"trigger": true}}',
        None,
        "",
        calls(("final_answer", {"trigger": True})),
    ),
    ("hermes", "This is some prior text that has nothing to do with tool calling.  \n", None, None, []),
    # Llama 3.x JSON.
    (
        "llama3_json",
        '{"name": "searchTool", "parameters": {"query": "test query", "limit": 10}}',
        None,
        "",
        calls(("searchTool", {"query": "test query", "limit": 10})),
    ),
    (
        "llama3_json",
        'Here are the results: {"name": "searchTool", "parameters": {"query": "test1"}}; '
        '{"name": "getOpenIncidentsTool", "parameters": {}}; '
        '{"name": "searchTool", "arguments": {"query": "test2"}} Would you like to know more?',
        None,
        "Here are the results: Would you like to know more?",
        calls(("searchTool", {"query": "test1"}), ("getOpenIncidentsTool", {}), ("searchTool", {"query": "test2"})),
    ),
    (
        "llama3_json",
        '<|python_tag|>{"name": "complexTool", "parameters": {"level1": {"level2": {"level3": {"value": "deep"}}}}};\n'
        '{"name": "parserTool", "parameters": {"text": "He said \\"Hello {world}\\" [ok]"}}',
        None,
        "",
        calls(
            ("complexTool", {"level1": {"level2": {"level3": {"value": "deep"}}}}),
            ("parserTool", {"text": 'He said "Hello {world}" [ok]'}),
        ),
    ),
    (
        "llama3_json",
        '{"name": "searchTool", "parameters": {"query": "test"}}\n{"name": "getOpenIncidentsTool", "parameters": {}}',
        None,
        "",
        calls(("searchTool", {"query": "test"}), ("getOpenIncidentsTool", {})),
    ),
    (  # braces in prose, and an object that is no call, are text
        "llama3_json",
        '{"name": "searchTool", "parameters": {"query": "test"}} I used {searchTool}; '
        'the arguments I passed were {"query": "test"}',
        None,
        'I used {searchTool}; the arguments I passed were {"query": "test"}',
        calls(("searchTool", {"query": "test"})),
    ),
    ("llama3_json", "function f() { return {a: 1}; }", None, None, []),
    # Mistral.
    (
        "mistral",
        '[TOOL_CALLS][{"name": "add", "arguments":{"a": 3.5, "b": 4}}]',
        None,
        "",
        [ToolCall("call_0", "add", '{"a":3.5,"b":4}')],
    ),
    (
        "mistral",
        'Hello[TOOL_CALLS] [{"name": "add", "arguments": {"a": 3.5, "b": 4}}, {"arguments":{"city": "San Francisco", '
        '"state": "CA", "unit": "celsius"}, "name": "get_current_weather"}]\nextra trailing data',
        None,
        "Hello\nextra trailing data",
        [
            ToolCall("call_0", "add", '{"a":3.5,"b":4}'),
            ToolCall("call_1", "get_current_weather", '{"city":"San Francisco","state":"CA","unit":"celsius"}'),
        ],
    ),
    (
        "mistral",
        '[TOOL_CALLS]add{"a": 3.5, "b": 4}[TOOL_CALLS]multiply{"a": 3, "b": 6}',
        None,
        "",
        [ToolCall("call_0", "add", '{"a":3.5,"b":4}'), ToolCall("call_1", "multiply", '{"a":3,"b":6}')],
    ),
    (
        "mistral",
        '[TOOL_CALLS]get_current_weather[ARGS]{"city": "Paris", "unit": "celsius"}[TOOL_CALLS]get_time[ARGS]{}',
        None,
        "",
        calls(("get_current_weather", {"city": "Paris", "unit": "celsius"}), ("get_time", {})),
    ),
    (
        "mistral",
        '[TOOL_CALLS] {"name": "get_age", "arguments": {"name": "Jöhn Doe"}}',
        None,
        "",
        calls(("get_age", {"name": "Jöhn Doe"})),
    ),
    # Pythonic: Llama 3.2 / Llama 4.
    (
        "pythonic",
        "[get_weather(city='San Francisco', metric='celsius')]",
        None,
        "",
        calls(("get_weather", {"city": "San Francisco", "metric": "celsius"})),
    ),
    (
        "pythonic",
        "[get_weather(city='San Francisco', metric='celsius'), register_user(name='John Doe', age=37, "
        "address={'city': 'San Francisco', 'state': 'CA'}, role=None, passed_test=True, aliases=['John', 'Johnny']), "
        "get_weather(), do_something_cool(additional_data={}, steps=[])]",
        None,
        "",
        calls(
            ("get_weather", {"city": "San Francisco", "metric": "celsius"}),
            (
                "register_user",
                {
                    "name": "John Doe",
                    "age": 37,
                    "address": {"city": "San Francisco", "state": "CA"},
                    "role": None,
                    "passed_test": True,
                    "aliases": ["John", "Johnny"],
                },
            ),
            ("get_weather", {}),
            ("do_something_cool", {"additional_data": {}, "steps": []}),
        ),
    ),
    (
        "pythonic",
        r"""[get_weather(city='Martha\'s Vineyard', metric='\"cool units\"')]""",
        None,
        "",
        calls(("get_weather", {"city": "Martha's Vineyard", "metric": '"cool units"'})),
    ),
    (
        "pythonic",
        '<|python_start|>[places.search(query="café ☕", near=(-33.9, 151.2), open=true, tags={"a"}, '
        "note='''two\nlines''', f=f'x', limit=+5,)]<|python_end|>",
        None,
        "",
        calls(
            (
                "places.search",
                {
                    "query": "café ☕",
                    "near": [-33.9, 151.2],
                    "open": True,
                    "tags": ["a"],
                    "note": "two\nlines",
                    "f": "x",
                    "limit": 5,
                },
            )
        ),
    ),
    ("pythonic", "How can I help you today?", None, None, []),
    ("pythonic", "[1] See the note below.", None, None, []),
    # Qwen3-Coder.
    (
        "qwen3_coder",
        "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX\n"
        "</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>",
        [WEATHER],
        "",
        calls(("get_current_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"})),
    ),
    (
        "qwen3_coder",
        "Let me calculate that area for you.<tool_call>\n<function=calculate_area>\n<parameter=shape>\ncircle\n"
        '</parameter>\n<parameter=dimensions>\n{"width": 10, \n "height": 20}\n</parameter>\n<parameter=precision>\n3\n'
        "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_current_weather>\n<parameter=city>\n"
        "Orlando\n</parameter>\n<parameter=state>\nFL\n</parameter>\n</function>\n</tool_call>",
        [WEATHER, AREA],
        "Let me calculate that area for you.",
        calls(
            ("calculate_area", {"shape": "circle", "dimensions": {"width": 10, "height": 20}, "precision": 3}),
            ("get_current_weather", {"city": "Orlando", "state": "FL"}),
        ),
    ),
    (
        "qwen3_coder",
        "<tool_call>\n<function=test_types>\n<parameter=int_param>\n42\n</parameter>\n<parameter=float_param>\n3.14\n"
        "</parameter>\n<parameter=bool_param>\nTrue\n</parameter>\n<parameter=str_param>\nhello world\n</parameter>\n"
        '<parameter=obj_param>\n{"key": "value"}\n</parameter>\n<parameter=maybe_int>\nnull\n</parameter>\n'
        "<parameter=list_param>\n[1, 2]\n</parameter>\n<parameter=unlisted>\n7\n</parameter>\n"
        "</function>\n</tool_call>",
        [TYPES],
        "",
        calls(
            (
                "test_types",
                {
                    "int_param": 42,
                    "float_param": 3.14,
                    "bool_param": True,
                    "str_param": "hello world",
                    "obj_param": {"key": "value"},
                    "maybe_int": None,
                    "list_param": [1, 2],
                    "unlisted": "7",
                },
            )
        ),
    ),
    (  # no <tool_call> wrapper; a value that is code, with its own angle brackets and blank lines
        "qwen3_coder",
        "<function=write_file>\n<parameter=path>\nsrc/é.py\n</parameter>\n<parameter=content>\n"
        'def f(a, b):\n    """a < b"""\n\n    return a<b  # "quoted" \\ ✓\n\n</parameter>\n</function>',
        [WRITE],
        "",
        calls(
            (
                "write_file",
                {"path": "src/é.py", "content": 'def f(a, b):\n    """a < b"""\n\n    return a<b  # "quoted" \\ ✓\n'},
            )
        ),
    ),
    (  # values cut off by the next tag, no newlines around them
        "qwen3_coder",
        "<tool_call><function=get_current_weather><parameter=city>Paris<parameter=unit>celsius</function></tool_call>",
        [WEATHER],
        "",
        calls(("get_current_weather", {"city": "Paris", "unit": "celsius"})),
    ),
]


def _id(sample: tuple) -> str:
    return f"{sample[0]}-{sample[1][:40]!r}"


@pytest.mark.parametrize("fmt, answer, tools, content, expected", SAMPLES, ids=[_id(s) for s in SAMPLES])
def test_a_whole_answer_reads_as_the_model_meant_it(fmt, answer, tools, content, expected):
    parser = get_parser(fmt)
    for whole_calls in (True, False):
        got = parser.parse(answer, tools, ids=counting_ids(), whole_calls=whole_calls)
        assert got == Parsed(answer if content is None else content, expected, 0)
    for call in expected:
        json.loads(call.arguments)


def _splits(answer: str, seed: int) -> list[list[str]]:
    """Every two-way split, one character at a time, and random many-way splits."""
    ways = [[answer[:k], answer[k:]] for k in range(len(answer) + 1)]
    ways.append(list(answer))
    rng = random.Random(seed)
    for _ in range(30):
        cuts = sorted(rng.sample(range(1, len(answer)), min(len(answer) - 1, rng.randint(2, 12))))
        ways.append([answer[a:b] for a, b in zip([0, *cuts], [*cuts, len(answer)], strict=True)])
    return ways


def assert_split_free(fmt: str, answer: str, tools: object, **options: object) -> None:
    parser = get_parser(fmt)
    whole = parser.parse(answer, tools, ids=counting_ids(), **options)
    for pieces in _splits(answer, len(answer)):
        assert read_in_pieces(parser, pieces, tools, **options) == whole, pieces


@pytest.mark.parametrize("fmt, answer, tools, content, expected", SAMPLES, ids=[_id(s) for s in SAMPLES])
def test_a_streamed_answer_reads_the_same_however_it_is_split(fmt, answer, tools, content, expected):
    for whole_calls in (True, False):
        assert_split_free(fmt, answer, tools, whole_calls=whole_calls)


@pytest.mark.parametrize("forced", [False, True])
@pytest.mark.parametrize("name", sorted(PARSERS))
def test_an_answer_where_no_call_can_start_reads_as_the_machine_reads_it(name: str, forced: bool) -> None:
    """A whole answer holding none of its format's markers' first characters is taken as text
    without the reading machine: what the machine gives it, text for text (whitespace too)."""
    parser = PARSERS[name]
    markers = "".join(m.text[0] for m in (*parser.markers, Marker("[", CallListReader)))
    rng = random.Random(f"{name}{forced}")
    alphabet = [c for c in " \t\n\r\x00abcXYZ09.,:;\"'(){}[]<>|/\\-_é日😀" if c not in markers]
    texts = ["", " ", "\n", "  Hello there \n", "Say hello", "a\tb\nc  "]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40))) for _ in range(300)]
    for text in texts:
        s = parser.stream([WEATHER], whole_calls=True, forced=forced)
        machine = merge(s.feed(text) + s.close(), s.failures)
        assert parser.parse(text, [WEATHER], forced=forced) == machine == Parsed(text, [], 0), repr(text)
