"""The neutral generation parameters: one typed, frozen record, which is also their registry.

Each field of `Params` is one neutral parameter. Its metadata gives its role:

  HINT      it steers sampling; leaving it out changes the tokens drawn, not the shape of the
            answer a client relies on. A backend without it gets the request anyway, and the
            response names the parameter in X-Gateway-Dropped-Params.
  CONTRACT  it changes what the client may rely on (how many choices, where generation stops,
            tool calls, logprobs, the form of the input or output). A backend without it gets
            nothing: the client gets a 400 that says what cannot be carried.

Each backend dialect says which parameters it carries and under which wire names
(gateway.codec.wirenames); anything else takes the default fate of its role, unless the dialect
says the gateway emulates it. Adding a parameter is one field here plus one wire name in each
dialect that has it.

Values are the neutral forms: lists become tuples (stop strings, token ids), everything else is
as the client sent it after its dialect validated it. None means "the client did not say".
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    HINT = "hint"
    CONTRACT = "contract"


class Fate(StrEnum):
    """What happens to one parameter on the way to one backend."""

    MAP = "map"  # the backend takes it (perhaps under another name or in another form)
    EMULATE = "emulate"  # the gateway provides it (stop strings cut in the stream, n by fan-out)
    DROP = "drop"  # a hint the backend lacks: left out, and named in the response header
    REFUSE = "refuse"  # a contract the backend lacks: the request fails with a 400


def _hint(doc: str) -> Any:
    return field(default=None, metadata={"role": Role.HINT, "doc": doc})


def _contract(doc: str) -> Any:
    return field(default=None, metadata={"role": Role.CONTRACT, "doc": doc})


@dataclass(frozen=True, slots=True, kw_only=True)
class Params:
    # What and how much to generate.
    max_tokens: int | None = _contract("the most tokens to generate")
    min_tokens: int | None = _hint("the fewest tokens to generate before end-of-sequence may stop it")
    stop: tuple[str, ...] | None = _contract("strings that end the generation")
    stop_token_ids: tuple[int, ...] | None = _contract("token ids that end the generation")
    include_stop_str_in_output: bool | None = _contract("keep the matched stop string in the text")
    bad_words: tuple[str, ...] | None = _contract("strings the generation must not contain")
    n: int | None = _contract("how many choices to return (absent: one)")
    best_of: int | None = _contract("how many sequences to generate to return the best")
    beam_width: int | None = _contract("beam search width")
    echo: bool | None = _contract("return the prompt in front of the completion")
    suffix: str | None = _contract("text that follows the completion")
    error_behavior: str | None = _contract("what to do with a prompt that is too long")
    # Sampling.
    temperature: float | None = _hint("sampling temperature; 0 means greedy")
    top_p: float | None = _hint("nucleus sampling mass")
    top_k: int | None = _hint("sample among the k most likely tokens")
    min_p: float | None = _hint("drop tokens less likely than this fraction of the best one")
    typical_p: float | None = _hint("typical sampling mass")
    repetition_penalty: float | None = _hint("penalty on tokens already present")
    presence_penalty: float | None = _hint("additive penalty on tokens already present")
    frequency_penalty: float | None = _hint("additive penalty by how often a token is present")
    logit_bias: Mapping[str, float] | None = _hint("bias by token id")
    do_sample: bool | None = _hint("sample (true) or decode greedily (false)")
    seed: int | None = _hint("random seed, for reproducible sampling")
    watermark: bool | None = _hint("watermark the output")
    ignore_eos: bool | None = _hint("go on past the end-of-sequence token")
    skip_special_tokens: bool | None = _hint("leave special tokens out of the text")
    truncate: int | None = _hint("keep only this many prompt tokens, from the end")
    # Scheduling and bookkeeping.
    priority: int | None = _hint("scheduling priority, 1 first")
    timeout: int | None = _hint("seconds the backend may spend on the request")
    user: str | None = _hint("an end-user id for the backend's abuse monitoring")
    # Chat.
    tools: tuple[Mapping[str, Any], ...] | None = _contract("functions the model may call")
    tool_choice: str | Mapping[str, Any] | None = _contract("whether and which tool to call")
    parallel_tool_calls: bool | None = _hint("allow several tool calls in one answer")
    response_format: Mapping[str, Any] | None = _contract("the answer's format (JSON, a schema)")
    chat_template_kwargs: Mapping[str, Any] | None = _hint("extra variables for the chat template")
    # Output details.
    logprobs: bool | None = _contract("return log probabilities of the generated tokens")
    top_logprobs: int | None = _contract("how many alternatives to return per token with logprobs")
    # Embeddings.
    encoding_format: str | None = _contract("float or base64 vectors")
    dimensions: int | None = _contract("vector length")
    instruction: str | None = _contract("an instruction for instruction-tuned embedding models")

    def items(self) -> Iterator[tuple[str, Any]]:
        """The parameters the client set, in registry order."""
        for name in NAMES:
            value = getattr(self, name)
            if value is not None:
                yield name, value

    def replace(self, **changes: Any) -> "Params":
        return replace(self, **changes)

    @property
    def greedy(self) -> bool:
        """Greedy decoding asked for, in whichever way the client's dialect says it."""
        return self.do_sample is False or self.temperature == 0

    @property
    def choices(self) -> int:
        return self.n or 1


NONE = Params()
NAMES: tuple[str, ...] = tuple(f.name for f in fields(Params))
ROLES: dict[str, Role] = {f.name: f.metadata["role"] for f in fields(Params)}


def default_fate(name: str) -> Fate:
    """The fate of a parameter a backend dialect says nothing about."""
    return Fate.DROP if ROLES[name] is Role.HINT else Fate.REFUSE


def is_off(value: Any) -> bool:
    """False, an empty list or mapping: set, but asking for nothing."""
    return value is False or value == () or value == {}


def make(values: dict[str, Any]) -> Params:
    """Params from neutral values read off a wire, with each dialect's ways of saying "the
    default" made one: one choice (n or best_of of 1) and no stop strings are "not set"; lists
    become tuples, so a value cannot change under the request that holds it."""
    for name, value in values.items():
        if isinstance(value, list):
            values[name] = tuple(value)
    if values.get("n") == 1:
        del values["n"]
    if values.get("best_of") == 1:
        del values["best_of"]
    if "stop" in values:
        stop = values["stop"]
        if isinstance(stop, str):
            values["stop"] = (stop,) if stop else None
        elif not stop:
            del values["stop"]
    return Params(**values)
