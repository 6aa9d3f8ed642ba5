"""The neutral generation parameters: one typed, frozen record, which is also their registry.

Each field of `Params` is one neutral parameter: its annotation gives its type and a `Spec`
with its role and what it means. The roles:

  HINT      it steers sampling; leaving it out changes the tokens drawn, not the shape of the
            answer a client relies on. A backend without it gets the request anyway, and the
            response names the parameter in X-Gateway-Dropped-Params.
  CONTRACT  it changes what the client may rely on (how many choices, where generation stops,
            tool calls, logprobs, the form of the input or output). A backend without it gets
            nothing: the client gets a 400 that says what cannot be carried.

Each dialect's schema marks the fields that are neutral parameters, with the servers that carry
them (gateway.codec.fields); anything a backend does not carry takes the default fate of its
role, unless the dialect says the gateway emulates it. Adding a parameter is one field here plus
one marked field in the schema of each dialect that has it.

Values are the neutral forms: lists become tuples (stop strings, token ids), everything else is
as the client sent it after its dialect validated it. None means "the client did not say".
"""

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, NamedTuple, get_type_hints

from gateway.records import record


class Role(StrEnum):
    HINT = "hint"
    CONTRACT = "contract"


class Fate(StrEnum):
    """What happens to one parameter on the way to one backend."""

    MAP = "map"  # the backend takes it (perhaps under another name or in another form)
    EMULATE = "emulate"  # the gateway provides it (stop strings cut in the stream, n by fan-out)
    DROP = "drop"  # a hint the backend lacks: left out, and named in the response header
    REFUSE = "refuse"  # a contract the backend lacks: the request fails with a 400


@record
class Spec:
    """What the registry says of one parameter besides its type."""

    role: Role
    doc: str


def hint(doc: str) -> Spec:
    return Spec(Role.HINT, doc)


def contract(doc: str) -> Spec:
    return Spec(Role.CONTRACT, doc)


class Params(NamedTuple):
    """The generation parameters of one request: a named tuple, so building one, copying one
    with a change and reading it all cost little on the hot path, and nothing can change it."""

    # What and how much to generate.
    max_tokens: Annotated[int | None, contract("the most tokens to generate")] = None
    min_tokens: Annotated[int | None, hint("the fewest tokens to generate before end-of-sequence may stop it")] = None
    stop: Annotated[tuple[str, ...] | None, contract("strings that end the generation")] = None
    stop_token_ids: Annotated[tuple[int, ...] | None, contract("token ids that end the generation")] = None
    include_stop_str_in_output: Annotated[bool | None, contract("keep the matched stop string in the text")] = None
    bad_words: Annotated[tuple[str, ...] | None, contract("strings the generation must not contain")] = None
    n: Annotated[int | None, contract("how many choices to return (absent: one)")] = None
    best_of: Annotated[int | None, contract("how many sequences to generate to return the best")] = None
    beam_width: Annotated[int | None, contract("beam search width")] = None
    echo: Annotated[bool | None, contract("return the prompt in front of the completion")] = None
    suffix: Annotated[str | None, contract("text that follows the completion")] = None
    error_behavior: Annotated[str | None, contract("what to do with a prompt that is too long")] = None
    # Sampling.
    temperature: Annotated[float | None, hint("sampling temperature; 0 means greedy")] = None
    top_p: Annotated[float | None, hint("nucleus sampling mass")] = None
    top_k: Annotated[int | None, hint("sample among the k most likely tokens")] = None
    min_p: Annotated[float | None, hint("drop tokens less likely than this fraction of the best one")] = None
    typical_p: Annotated[float | None, hint("typical sampling mass")] = None
    repetition_penalty: Annotated[float | None, hint("penalty on tokens already present")] = None
    presence_penalty: Annotated[float | None, hint("additive penalty on tokens already present")] = None
    frequency_penalty: Annotated[float | None, hint("additive penalty by how often a token is present")] = None
    logit_bias: Annotated[Mapping[str, float] | None, hint("bias by token id")] = None
    do_sample: Annotated[bool | None, hint("sample (true) or decode greedily (false)")] = None
    seed: Annotated[int | None, hint("random seed, for reproducible sampling")] = None
    watermark: Annotated[bool | None, hint("watermark the output")] = None
    ignore_eos: Annotated[bool | None, hint("go on past the end-of-sequence token")] = None
    skip_special_tokens: Annotated[bool | None, hint("leave special tokens out of the text")] = None
    truncate: Annotated[int | None, hint("keep only this many prompt tokens, from the end")] = None
    # Scheduling and bookkeeping.
    priority: Annotated[int | None, hint("scheduling priority, 1 first")] = None
    timeout: Annotated[int | None, hint("seconds the backend may spend on the request")] = None
    user: Annotated[str | None, hint("an end-user id for the backend's abuse monitoring")] = None
    # Chat.
    tools: Annotated[tuple[Mapping[str, Any], ...] | None, contract("functions the model may call")] = None
    tool_choice: Annotated[str | Mapping[str, Any] | None, contract("whether and which tool to call")] = None
    parallel_tool_calls: Annotated[bool | None, hint("allow several tool calls in one answer")] = None
    response_format: Annotated[Mapping[str, Any] | None, contract("the answer's format (JSON, a schema)")] = None
    reasoning_effort: Annotated[
        str | None, hint("how much the model reasons before it answers (low, medium, high)")
    ] = None
    # Tools the API provider runs itself (OpenAI's web search, file search...): a self-hosted
    # model has none, so they are dropped, unless the client forces one (then refused).
    server_tools: Annotated[tuple[Mapping[str, Any], ...] | None, hint("tools the provider runs itself")] = None
    server_tool_choice: Annotated[
        Mapping[str, Any] | None, contract("a tool the provider runs that must be called")
    ] = None
    chat_template_kwargs: Annotated[Mapping[str, Any] | None, hint("extra variables for the chat template")] = None
    # Output details.
    logprobs: Annotated[bool | None, contract("return log probabilities of the generated tokens")] = None
    top_logprobs: Annotated[int | None, contract("how many alternatives to return per token with logprobs")] = None
    # Embeddings.
    encoding_format: Annotated[str | None, contract("float or base64 vectors")] = None
    dimensions: Annotated[int | None, contract("vector length")] = None
    instruction: Annotated[str | None, contract("an instruction for instruction-tuned embedding models")] = None

    def items(self) -> list[tuple[str, Any]]:
        """The parameters the client set, in registry order."""
        return [(name, value) for name, value in zip(NAMES, self, strict=True) if value is not None]

    def replace(self, **changes: Any) -> "Params":
        """A copy with these parameters changed (a ValueError names any unknown)."""
        return _filled(self, changes)

    @property
    def greedy(self) -> bool:
        """Greedy decoding asked for, in whichever way the client's dialect says it."""
        return self.do_sample is False or self.temperature == 0

    @property
    def choices(self) -> int:
        return self.n or 1


NONE = Params()
NAMES: tuple[str, ...] = Params._fields
SPECS: dict[str, Spec] = {
    name: next(m for m in annotated.__metadata__ if isinstance(m, Spec))
    for name, annotated in get_type_hints(Params, include_extras=True).items()
}
ROLES: dict[str, Role] = {name: spec.role for name, spec in SPECS.items()}
_AT = {name: i for i, name in enumerate(NAMES)}


def default_fate(name: str) -> Fate:
    """The fate of a parameter a backend dialect says nothing about."""
    return Fate.DROP if ROLES[name] is Role.HINT else Fate.REFUSE


def is_off(value: Any) -> bool:
    """False, an empty list or mapping: set, but asking for nothing."""
    return value is False or value == () or value == {}


def make(values: dict[str, Any]) -> Params:
    """Params from neutral values read off a wire, with each dialect's ways of saying "the
    default" made one: one choice (n or best_of of 1), no stop strings and a plain-text response
    format are "not set"; lists become tuples, so a value cannot change under the request that
    holds it."""
    for name, value in values.items():
        if isinstance(value, list):
            values[name] = tuple(value)
    if values.get("n") == 1:
        del values["n"]
    if values.get("best_of") == 1:
        del values["best_of"]
    format_ = values.get("response_format")
    if format_ is not None and format_.get("type") == "text":
        del values["response_format"]  # plain text asks for nothing
    if "stop" in values:
        stop = values["stop"]
        if isinstance(stop, str):
            values["stop"] = (stop,) if stop else None
        elif not stop:
            del values["stop"]
    return _filled(NONE, values) if values else NONE


def _filled(base: Params, values: Mapping[str, Any]) -> Params:
    """`base` with `values` set, by position: the named tuple's own constructor takes every
    field as a keyword argument (some forty), and its `_replace` pops each by name, either of
    which costs more than the rest of reading the parameters. A ValueError names an unknown."""
    fields = list(base)
    for name, value in values.items():
        at = _AT.get(name)
        if at is None:
            raise ValueError(f"{name!r} is not a neutral parameter")
        fields[at] = value
    return tuple.__new__(Params, fields)
