"""TGI as clients speak it: POST /generate, /generate_stream, / (compat); GET /info, /health.

The parsing of a TGI body is shared with MindIE's TGI-style routes. See docs/dialects/tgi.md.
"""

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from gateway import __version__, jsonutil
from gateway.codec.contract import Caller, Endpoint, GroupView, Mount, PathValues, Reply
from gateway.codec.errors import ErrorTable, stated
from gateway.codec.structured import from_grammar
from gateway.codec.validation import load_object, validate
from gateway.codec.wirenames import WireNames
from gateway.dialects.tgi import render
from gateway.dialects.tgi.outbound import WIRE
from gateway.dialects.tgi.params import PARAMETERS_IN
from gateway.dialects.tgi.schema import GenerateRequest
from gateway.neutral import params as neutral
from gateway.neutral.errors import GatewayError, Kind, Unsupported
from gateway.neutral.types import Request, Task

# TGI's status and `error_type` for each kind.
ERRORS: ErrorTable = {
    Kind.VALIDATION: (422, "validation"),
    Kind.UNSUPPORTED: (422, "validation"),
    Kind.TOO_LARGE: (422, "validation"),
    Kind.CLIENT_TIMEOUT: (408, "validation"),
    Kind.NOT_FOUND: (404, "not_found"),
    Kind.AUTH: (401, "authentication"),
    Kind.PERMISSION: (403, "authentication"),
    Kind.RATE_LIMIT: (429, "overloaded"),
    Kind.OVERLOADED: (429, "overloaded"),
    Kind.UPSTREAM: (424, "generation"),
    Kind.TIMEOUT: (500, "incomplete_generation"),
    Kind.UNAVAILABLE: (503, "unhealthy"),
    Kind.INTERNAL: (500, "incomplete_generation"),
}


def error_body(err: GatewayError, stream: bool = False) -> dict[str, str]:
    kind = "incomplete_generation_stream" if stream and err.kind is not Kind.VALIDATION else ERRORS[err.kind][1]
    return {"error": err.message, "error_type": kind}


def _error_frame(err: GatewayError) -> bytes:
    return b"data:" + jsonutil.dumps(error_body(err, stream=True)) + b"\n\n"


FLAVOUR = render.Flavour(
    name="tgi",
    space=False,
    index=True,
    prompt_sep="",
    prompt_tokens=False,
    input_length=True,
    mindie_token_keys=False,
    unknown_id=0,  # TGI clients require an integer; 0 marks "not known"
    error_frame=_error_frame,
    id_lists=False,
)


def neutral_params(p: BaseModel | None, wire: WireNames = PARAMETERS_IN) -> neutral.Params:
    """Neutral params from a validated TGI/MindIE `parameters` object (unset and null left out),
    read by `wire`, the names of the model it was validated with."""
    if p is None:
        return neutral.NONE
    # The validated fields, read as a dict: only what this dialect's model declares counts.
    values: dict[str, Any] = p.__dict__
    if values.get("top_n_tokens"):
        raise Unsupported("parameters.top_n_tokens is not supported by the gateway", param="parameters.top_n_tokens")
    read = wire.read(values)
    grammar = values.get("grammar")
    if grammar is not None:
        read["response_format"] = from_grammar(grammar, "parameters.grammar")
    return neutral.make(read)


def _warps(p: neutral.Params) -> bool:
    """Whether TGI would sample because of these settings, do_sample or not."""
    return (
        (p.temperature is not None and p.temperature != 1.0)
        or bool(p.top_k)
        or (p.top_p is not None and p.top_p < 1.0)
        or (p.typical_p is not None and p.typical_p < 1.0)
    )


def parse_generate(
    data: dict[str, Any],
    model: type[BaseModel],
    wire: str,
    stream: bool,
    default_max_tokens: int | None = None,
    tgi_rules: bool = False,
) -> Request:
    """A TGI-shaped body (`inputs` + `parameters`) to a neutral text completion request.

    `tgi_rules`, TGI's own semantics: a matched stop sequence stays in the text, and a request
    that neither sets do_sample nor any sampling warper (temperature other than 1, top_k, top_p or
    typical_p below 1) is decoded greedily, whatever the backend's default.
    """
    m = validate(model, data)
    parameters = getattr(m, "parameters", None)
    params = neutral_params(parameters)
    if params.max_tokens is None and default_max_tokens is not None:
        params = params.replace(max_tokens=default_max_tokens)
    if tgi_rules:
        if params.stop and params.include_stop_str_in_output is None:
            params = params.replace(include_stop_str_in_output=True)
        if not params.do_sample and not _warps(params):
            params = params.replace(do_sample=False)
    prompt: str = getattr(m, "inputs")  # noqa: B009 - the field lives on every TGI-shaped model
    return Request(
        task=Task.COMPLETION,
        wire=wire,
        prompt=prompt,
        stream=stream,
        params=params,
        raw=data,
        wants_token_ids=True,
        wants_token_details=bool(getattr(parameters, "details", False)),
    )


def _parse(stream: bool | None) -> Any:
    def parse(body: bytes, path: PathValues) -> Request:
        data = load_object(body)
        return parse_generate(
            data, GenerateRequest, WIRE, bool(data.get("stream")) if stream is None else stream, tgi_rules=True
        )

    return parse


GENERATE = Endpoint(_parse(False), render.render_result(FLAVOUR, array=False), None)
GENERATE_STREAM = Endpoint(_parse(True), render.render_result(FLAVOUR, array=False), render.stream_renderer(FLAVOUR))
COMPAT = Endpoint(_parse(None), render.render_result(FLAVOUR, array=True), render.stream_renderer(FLAVOUR))


async def info(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    ids = group.model_ids()
    body = {
        "model_id": ids[0] if ids else None,
        "model_sha": None,
        "model_pipeline_tag": "text-generation",
        "max_concurrent_requests": 128,
        "max_best_of": 1,
        "max_stop_sequences": 4,
        "max_input_tokens": None,
        "max_total_tokens": None,
        "validation_workers": 1,
        "max_client_batch_size": 1,
        "router": "llm-gateway",
        "version": __version__,
        "sha": None,
        "docker_label": None,
    }
    return Reply(body=jsonutil.dumps(body))


async def health(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    return Reply(body=None)


class TGIInbound:
    mounts: Sequence[Mount] = (
        Mount("POST", "/generate", GENERATE),
        Mount("POST", "/generate_stream", GENERATE_STREAM),
        Mount("POST", "/", COMPAT),
        Mount("GET", "/info", info=info),
        Mount("GET", "/health", info=health, auth=False),
    )

    def error_reply(self, err: GatewayError) -> Reply:
        return Reply(stated(ERRORS, err)[0], jsonutil.dumps(error_body(err)))
