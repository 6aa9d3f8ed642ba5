"""Structured output: the neutral `response_format` (OpenAI's: `json_object`, or `json_schema`
with a schema) as the JSON schema a backend holds its decoding to, and the other ways clients
ask for JSON (TGI's `grammar`, vLLM's `guided_json` and `structured_outputs`, guided decoding
inputs, Anthropic's output format) read into it. A response format is a contract: a backend
that cannot hold its output to it refuses the request (see docs/tools.md)."""

from collections.abc import Mapping
from typing import Any

from gateway import jsonutil
from gateway.neutral.errors import InvalidRequest, Unsupported

# What `json_object` asks for: any JSON object.
ANY_OBJECT: Mapping[str, Any] = {"type": "object"}


def schema_of(response_format: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a response format holds the answer to; None for plain text."""
    kind = response_format.get("type")
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        return dict(schema) if isinstance(schema, Mapping) else dict(ANY_OBJECT)
    if kind == "json_object":
        return dict(ANY_OBJECT)
    return None


def is_any_object(response_format: Mapping[str, Any]) -> bool:
    """Whether the format asks for any JSON object, with no schema of its own."""
    return response_format.get("type") == "json_object"


def with_schema(schema: Mapping[str, Any], name: str = "response") -> dict[str, Any]:
    """A `json_schema` response format holding `schema`."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": dict(schema)}}


def json_value(value: Any, what: str) -> Any:
    """A schema as a client sent it: an object, or a string holding one."""
    if isinstance(value, str):
        try:
            value = jsonutil.loads(value)
        except jsonutil.JSONDecodeError:
            raise InvalidRequest(f"{what} is not valid JSON", param=what, code="invalid_value") from None
    if not isinstance(value, dict):
        raise InvalidRequest(f"{what} must be a JSON schema (an object)", param=what, code="invalid_value")
    return value


def from_grammar(grammar: Mapping[str, Any], where: str) -> dict[str, Any]:
    """TGI's `grammar`: `{"type": "json", "value": schema}` (or `json_schema`, whose value holds
    `schema`) as a response format; a regular expression has no such form and is refused."""
    kind = grammar.get("type")
    if kind == "json":
        return with_schema(json_value(grammar.get("value"), f"{where}.value"))
    if kind == "json_schema":
        value = json_value(grammar.get("value"), f"{where}.value")
        return with_schema(json_value(value.get("schema", value), f"{where}.value.schema"))
    raise Unsupported(f"{where} of type {kind!r} is not supported by the gateway: only JSON grammars are", param=where)


def from_vllm(guided_json: Any, structured_outputs: Any, where: str = "") -> dict[str, Any] | None:
    """vLLM's JSON forms of structured output (`guided_json`; `structured_outputs` with `json` or
    `json_object`, as an object or a string holding one) as a response format; None when neither
    asks for JSON."""
    if guided_json is not None:
        return with_schema(json_value(guided_json, where + "guided_json"))
    if structured_outputs is None:
        return None
    outputs = json_value(structured_outputs, where + "structured_outputs")
    if outputs.get("json") is not None:
        return with_schema(json_value(outputs["json"], where + "structured_outputs.json"))
    if outputs.get("json_object"):
        return {"type": "json_object"}
    return None


# TRT-LLM's guided decoding: the guide types that are JSON.
GUIDE_JSON = "json"
GUIDE_SCHEMA = "json_schema"


def from_guide(guide_type: str | None, guide: str | None) -> dict[str, Any] | None:
    """TRT-LLM's `guided_decoding_guide_type` and `guided_decoding_guide` as a response format;
    None without a guide type. Types that are not JSON (regex, EBNF) are refused."""
    if guide_type is None or guide_type == "":
        return None
    if guide_type == GUIDE_JSON:
        return {"type": "json_object"}
    if guide_type == GUIDE_SCHEMA:
        return with_schema(json_value(guide, "guided_decoding_guide"))
    raise Unsupported(
        f"guided_decoding_guide_type {guide_type!r} is not supported by the gateway: only json and json_schema are",
        param="guided_decoding_guide_type",
    )


def guide_of(response_format: Mapping[str, Any]) -> dict[str, str]:
    """A response format as TRT-LLM's guided decoding inputs."""
    if is_any_object(response_format):
        return {"guided_decoding_guide_type": GUIDE_JSON}
    schema = schema_of(response_format)
    if schema is None:
        return {}
    return {"guided_decoding_guide_type": GUIDE_SCHEMA, "guided_decoding_guide": jsonutil.dumps_str(schema)}


def outputs_of(response_format: Mapping[str, Any]) -> dict[str, Any] | None:
    """A response format as vLLM's `structured_outputs` object; None for plain text."""
    if is_any_object(response_format):
        return {"json_object": True}
    schema = schema_of(response_format)
    return None if schema is None else {"json": schema}
