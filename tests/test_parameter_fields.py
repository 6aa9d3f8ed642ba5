"""A parameter is declared once, as a marked field of each dialect's schema, and all else follows.

What clients send is read by the marked field names, what each server takes is written by its own
spelling, the OpenAI fast path judges each field by its type and bounds, and the Triton model
metadata lists the marked tensors: one more field shows up in each of them. A range a server
holds to is the one its schema gives, the same for TGI and for both MindIE routes.
"""

import importlib
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from gateway.codec.contract import BackendView
from gateway.codec.fields import Carries, Tensor, plain_checks, reading, tensor_inputs, writing
from gateway.codec.validation import OpenModel
from gateway.dialects import registry
from gateway.dialects.mindie import params as mindie_names
from gateway.dialects.openai.schema import PUBLIC, VLLM, ChatCompletionRequest
from gateway.dialects.tgi.outbound import sampling
from gateway.dialects.triton import schema as triton
from gateway.dialects.triton.flavors import mindie_body
from gateway.neutral.errors import Unsupported
from gateway.neutral.params import Fate, Params
from gateway.neutral.types import Request, Task
from tests.test_openai_plain_chat import VALUES


class ChatWithTypicalP(ChatCompletionRequest):
    """OpenAI chat as it would be with one more vLLM extension: one field, nothing else."""

    typical_p: Annotated[float | None, Field(gt=0, le=1), Carries(VLLM)] = None


class TritonWithWatermark(triton.GenerateParameters):
    watermark: Annotated[bool | None, Carries(triton.VLLM, trtllm="use_watermark"), Tensor()] = None


def test_one_more_marked_field_is_read_written_checked_and_described():
    # Read from what clients send, under its field name.
    assert reading(ChatWithTypicalP).read({"typical_p": 0.5, "top_p": 0.9}) == {"typical_p": 0.5, "top_p": 0.9}
    # Written for the surfaces it names, and only those.
    assert writing(ChatWithTypicalP, VLLM).write(Params(typical_p=0.5, max_tokens=3)) == {
        "max_tokens": 3,
        "typical_p": 0.5,
    }
    assert "typical_p" not in writing(ChatWithTypicalP, PUBLIC).carried
    # Judged by the fast path from its type and bounds, as the model judges it.
    check = plain_checks(ChatWithTypicalP)["typical_p"]
    assert [v for v in (None, 0.5, 1, 1.0) if check(v)] == [None, 0.5, 1, 1.0]
    assert not any(check(v) for v in (0, 0.0, -0.5, 1.5, True, "0.5", [0.5]))
    # A Triton tensor under TRT-LLM's name for it, typed by the field; the vLLM backend's name
    # is the field's.
    assert tensor_inputs(TritonWithWatermark, triton.TRTLLM)[-1] == ("use_watermark", "BOOL", "TYPE_BOOL", 1)
    assert writing(TritonWithWatermark, triton.TRTLLM).write(Params(watermark=True)) == {"use_watermark": True}
    assert writing(TritonWithWatermark, triton.VLLM).write(Params(watermark=True))["watermark"] is True


def test_a_mark_naming_no_neutral_parameter_is_refused():
    class Wrong(OpenModel):
        nucleus: Annotated[float | None, Carries("server", param="nucleus")] = None

    with pytest.raises(ValueError, match="not a neutral parameter"):
        writing(Wrong, "server")


def test_an_alias_marked_to_win_is_read_over_the_other_and_written():
    names = reading(ChatCompletionRequest)
    assert names.read({"max_tokens": 5, "max_completion_tokens": 7}) == {"max_tokens": 7}
    assert names.read({"max_completion_tokens": 7, "max_tokens": 5}) == {"max_tokens": 7}
    assert writing(ChatCompletionRequest, PUBLIC).write(Params(max_tokens=7)) == {"max_completion_tokens": 7}
    assert writing(ChatCompletionRequest, VLLM).write(Params(max_tokens=7)) == {"max_tokens": 7}


class Shapes(OpenModel):
    """A field of every shape the fast checks are derived for."""

    positive: Annotated[int | None, Field(gt=0, lt=10)] = None
    ratio: Annotated[float | None, Field(gt=0, lt=1)] = None
    anything: int | None = None
    flag: bool = False
    name: Annotated[str, Field(min_length=1, max_length=3)] = "x"
    ids: Annotated[list[Annotated[int, Field(ge=0)]] | None, Field(max_length=2)] = None
    words: str | Annotated[list[str], Field(max_length=2)] | None = None
    options: dict[str, Any] | None = None


def _accepted(model: type[BaseModel], field: str, value: Any) -> bool:
    try:
        model.model_validate({field: value})
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("field", sorted(Shapes.model_fields))
def test_a_derived_fast_check_passes_only_what_the_model_takes(field: str):
    check = plain_checks(Shapes)[field]
    passed = [v for v in [*VALUES, 9, 10, "abcd", [1, 2, 3], ["a", "b", "c"]] if check(v)]
    assert passed, f"{field}: nothing passes"
    for value in passed:
        assert _accepted(Shapes, field, value), f"{field}={value!r} passes the check, not the model"


def test_fields_judged_by_a_validator_or_a_nested_model_get_no_fast_check():
    checks = plain_checks(ChatCompletionRequest)
    assert not {"logit_bias", "tools", "tool_choice", "response_format", "messages"} & set(checks)


# Each backend dialect with the options that change what it carries.
BACKENDS = [
    ("openai", {"extensions": "none"}),
    ("openai", {"extensions": "vllm"}),
    ("databricks", {}),
    ("tgi", {}),
    ("mindie", {"prefer": "native"}),
    ("mindie", {"prefer": "openai"}),
    ("triton", {"flavor": "trtllm"}),
    ("triton", {"flavor": "vllm"}),
    ("triton", {"flavor": "mindie"}),
]
# Mapped by each outbound's own code rather than by name: logprobs in each task's shape, greedy
# in the server's words, the chat template's variables on the way to a prompt, the encoding of
# embeddings.
BY_CODE = {"logprobs", "top_logprobs", "do_sample", "chat_template_kwargs", "encoding_format"}


def _marked(dialect: str) -> set[str]:
    """The neutral parameters the marked fields of a dialect's schema models name."""
    module = importlib.import_module(f"gateway.dialects.{dialect}.schema")
    models = [m for m in vars(module).values() if isinstance(m, type) and issubclass(m, BaseModel)]
    return {
        mark.param or name
        for model in models
        for name, field in model.model_fields.items()
        for mark in field.metadata
        if isinstance(mark, Carries)
    }


@pytest.mark.parametrize(("dialect", "options"), BACKENDS)
def test_every_parameter_a_backend_takes_is_a_marked_field_of_its_schema(dialect: str, options: dict[str, Any]):
    outbound = registry.get(dialect).outbound
    backend = BackendView("b", dialect, "m", outbound.options_model.model_validate(options))
    mapped: set[str] = set()
    for task in (Task.CHAT, Task.COMPLETION, Task.EMBEDDING):
        try:
            fates = outbound.carriage(Request(task=task, wire="openai", model="m", prompt="hi"), backend).fates
        except Unsupported:
            continue  # a task the backend does not serve
        mapped |= {name for name, fate in fates.items() if fate == Fate.MAP}
    assert mapped
    assert mapped - BY_CODE <= _marked(dialect)


@pytest.mark.parametrize("top_k", [-1, 0])
def test_top_k_of_off_is_left_out_alike_for_tgi_and_mindie(top_k: int):
    """TGI and MindIE both take only a top_k above 0; -1 and 0 are how vLLM and OpenAI-style
    servers say "off", which those servers refuse."""
    p = Params(top_k=top_k, temperature=0.7, max_tokens=4)
    assert "top_k" not in sampling(p, 4)
    assert "top_k" not in sampling(p, 4, mindie_names.NATIVE_OUT)
    assert "top_k" not in mindie_body(p, "r", "hi", False, False)["parameters"]
    within = p.replace(top_k=5)
    assert sampling(within, 4)["top_k"] == 5
    assert sampling(within, 4, mindie_names.NATIVE_OUT)["top_k"] == 5
    assert mindie_body(within, "r", "hi", False, False)["parameters"]["top_k"] == 5


def test_top_k_beyond_mindies_bound_is_left_out_for_mindie_only():
    p = Params(top_k=2**31, temperature=0.7)
    assert sampling(p, 4)["top_k"] == 2**31  # TGI sets no upper bound
    assert "top_k" not in sampling(p, 4, mindie_names.NATIVE_OUT)
    assert "top_k" not in mindie_body(p, "r", "hi", False, False)["parameters"]


def test_greedy_leaves_out_what_would_turn_sampling_on_by_each_servers_range():
    p = Params(temperature=0, top_p=0.9, typical_p=1.0, top_k=3)
    assert sampling(p, 4) == {"max_new_tokens": 4, "top_k": 3, "do_sample": False}
    # MindIE's native routes take a typical_p of 1, which samples nothing.
    assert sampling(p, 4, mindie_names.NATIVE_OUT) == {
        "max_new_tokens": 4,
        "top_k": 3,
        "typical_p": 1.0,
        "do_sample": False,
    }


def test_a_params_copy_changes_only_what_it_names_and_refuses_a_name_it_lacks():
    p = Params(max_tokens=5, temperature=0.5, stop=("a",))
    changed = p.replace(max_tokens=None, top_k=3)
    assert type(changed) is Params
    assert changed == p._replace(max_tokens=None, top_k=3)
    assert p.max_tokens == 5  # the original is untouched
    assert changed.items() == [("stop", ("a",)), ("temperature", 0.5), ("top_k", 3)]
    with pytest.raises(ValueError, match="'nope' is not a neutral parameter"):
        p.replace(nope=1)
