"""What a request's tool_choice asks of a backend that only carries text, the JSON schema that
forces calls (mirroring vLLM's for required and named choices), and one call written as each
format's models write it, which reads back as that call."""

import copy
import json

import jsonschema
import pytest

from gateway.adapters.toolcalls import PARSERS, ToolAction, ToolCall, get_parser, render_call
from tests.support import counting_ids
from tests.test_toolcalls_formats import AREA, TYPES, WEATHER

TOOLS = [WEATHER, AREA]
JSON_FORMATS = {"hermes": "arguments", "llama3_json": "parameters", "mistral": "arguments"}


@pytest.mark.parametrize("fmt", sorted(PARSERS))
def test_auto_and_none_need_no_constraint(fmt):
    parser = get_parser(fmt)
    assert parser.plan(TOOLS, "auto").action is ToolAction.AUTO
    assert parser.plan(TOOLS, None).action is ToolAction.AUTO
    assert parser.plan(TOOLS, "none").action is ToolAction.NONE
    assert parser.plan(None, "auto").action is ToolAction.NONE
    assert parser.plan(None, "required").action is ToolAction.REFUSE
    assert parser.plan(TOOLS, "sometimes").action is ToolAction.REFUSE


@pytest.mark.parametrize("fmt", sorted(JSON_FORMATS))
def test_required_is_forced_by_a_schema_for_a_list_of_calls(fmt):
    key = JSON_FORMATS[fmt]
    plan = get_parser(fmt).plan(TOOLS, "required")
    assert plan.action is ToolAction.FORCE
    assert plan.schema == {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "anyOf": [
                {
                    "properties": {
                        "name": {"type": "string", "enum": [t["function"]["name"]]},
                        key: t["function"]["parameters"],
                    },
                    "required": ["name", key],
                }
                for t in TOOLS
            ],
        },
    }
    answer = json.dumps(
        [
            {"name": "get_current_weather", key: {"city": "Zürich", "unit": "celsius"}},
            {"name": "calculate_area", key: {"shape": "circle", "dimensions": {"r": 2}}},
        ],
        ensure_ascii=False,
    )
    jsonschema.validate(json.loads(answer), plan.schema)
    got = get_parser(fmt).parse(answer, TOOLS, ids=counting_ids(), forced=True)
    assert got.calls == [
        ToolCall("call_0", "get_current_weather", '{"city":"Zürich","unit":"celsius"}'),
        ToolCall("call_1", "calculate_area", '{"shape":"circle","dimensions":{"r":2}}'),
    ]
    assert (got.content, got.failures) == ("", 0)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "rm_rf", key: {}}], plan.schema)


def test_a_named_choice_or_no_parallel_calls_allows_one_call():
    named = {"type": "function", "function": {"name": "calculate_area"}}
    schema = get_parser("hermes").calls_schema(TOOLS, named)
    assert schema["maxItems"] == 1
    assert [v["properties"]["name"]["enum"] for v in schema["items"]["anyOf"]] == [["calculate_area"]]
    responses_form = {"type": "function", "name": "calculate_area"}
    assert get_parser("hermes").calls_schema(TOOLS, responses_form) == schema
    assert get_parser("hermes").calls_schema(TOOLS, "required", parallel_tool_calls=False)["maxItems"] == 1
    assert "maxItems" not in get_parser("hermes").calls_schema(TOOLS, "required", parallel_tool_calls=True)


def test_a_named_choice_of_a_tool_the_request_lacks_is_refused():
    plan = get_parser("hermes").plan(TOOLS, {"type": "function", "function": {"name": "rm_rf"}})
    assert plan.action is ToolAction.REFUSE
    assert "rm_rf" in plan.reason


@pytest.mark.parametrize("fmt", ["pythonic", "qwen3_coder"])
def test_a_format_that_is_not_json_cannot_be_forced(fmt):
    plan = get_parser(fmt).plan(TOOLS, "required")
    assert plan.action is ToolAction.REFUSE
    assert get_parser(fmt).calls_schema(TOOLS, "required") is None


def test_the_tools_definitions_are_gathered_where_their_references_point():
    tool = {
        "type": "function",
        "function": {
            "name": "add_person",
            "parameters": {
                "type": "object",
                "properties": {"person": {"$ref": "#/$defs/Person"}},
                "$defs": {"Person": {"type": "object", "properties": {"age": {"type": "integer"}}}},
            },
        },
    }
    before = copy.deepcopy(tool)
    schema = get_parser("mistral").calls_schema([tool], "required")
    assert schema["$defs"] == {"Person": {"type": "object", "properties": {"age": {"type": "integer"}}}}
    assert "$defs" not in schema["items"]["anyOf"][0]["properties"]["arguments"]
    assert tool == before
    jsonschema.validate([{"name": "add_person", "arguments": {"person": {"age": 3}}}], schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "add_person", "arguments": {"person": {"age": "old"}}}], schema)
    other = copy.deepcopy(tool)
    other["function"]["name"] = "add_other"
    other["function"]["parameters"]["$defs"]["Person"] = {"type": "string"}
    assert get_parser("mistral").plan([tool, other], "required").action is ToolAction.REFUSE


def test_a_forced_answer_that_is_no_list_of_calls_is_text():
    got = get_parser("hermes").parse("I cannot do that.", TOOLS, forced=True)
    assert (got.content, got.calls, got.failures) == ("I cannot do that.", [], 0)


ARGUMENTS = [
    {},
    {"city": "São Paulo 🌧", "days": 3},
    {"query": 'He said "hi" \\ {x} [y]', "nested": {"a": [1, 2.5, None, True], "b": {"c": "d"}}},
    {"content": "line 1\nline 2\n", "precision": -2},
]


@pytest.mark.parametrize("fmt", sorted(PARSERS))
@pytest.mark.parametrize("arguments", ARGUMENTS, ids=range(len(ARGUMENTS)))
def test_a_rendered_call_reads_back_as_that_call(fmt, arguments):
    # Qwen3-Coder writes values as text: the schema says which ones are not strings.
    schema = {"city": "string", "days": "integer", "nested": "object", "precision": "integer", "content": "string"}
    properties = {k: {"type": t} for k, t in schema.items()}
    tools = [{"type": "function", "function": {"name": "tool_1", "parameters": {"properties": properties}}}]
    text = render_call(fmt, "tool_1", arguments)
    got = get_parser(fmt).parse("Let me check.\n" + text, tools, ids=counting_ids())
    compact = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    if fmt == "pythonic":  # the list must open the answer
        got = get_parser(fmt).parse(text, tools, ids=counting_ids())
    assert got.calls == [ToolCall("call_0", "tool_1", compact)]
    assert got.failures == 0
    assert render_call(fmt, "tool_1", compact) == text


def test_qwen3_coder_types_values_by_the_schema_as_vllm_does():
    tools = [TYPES]
    text = render_call("qwen3_coder", "test_types", {"int_param": "7", "float_param": "2.0", "bool_param": "0"})
    got = get_parser("qwen3_coder").parse(text, tools)
    assert json.loads(got.calls[0].arguments) == {"int_param": 7, "float_param": 2, "bool_param": False}


def test_an_unknown_format_name_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="hermes, llama3_json, mistral, pythonic, qwen3_coder"):
        get_parser("granite")
