"""Triton as clients speak it: the generate extension plus KServe v2 health and metadata.

The model comes from the path and picks the route. In front of a Triton server the version, the
model's metadata, configuration and readiness, and the server's metadata are the server's own
(the model renamed to the client's name); in front of another dialect's backend the model has
one version, "1", and the gateway describes what its generate route reads. Errors are
`{"error": "..."}` with Triton's statuses; health answers are empty bodies with 200 or 400, as
Triton gives them. See docs/dialects/triton.md.
"""

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from gateway import __version__, jsonutil
from gateway.codec.contract import Caller, Endpoint, GroupView, Mount, PathValues, Reply, RouteView
from gateway.codec.errors import ErrorTable, stated
from gateway.codec.structured import from_guide, from_vllm
from gateway.codec.validation import load_object, validate
from gateway.dialects.triton import params as names
from gateway.dialects.triton import render
from gateway.dialects.triton.schema import (
    GenerateParameters,
    Options,
    merged_parameters,
    model_config,
    model_metadata,
    server_metadata,
)
from gateway.neutral import params as neutral
from gateway.neutral.errors import GatewayError, InvalidRequest, Kind, NotFound
from gateway.neutral.types import Request, Task

# The generate extension, as a Triton server speaks it (the outbound codec says the same).
WIRE = "triton"

# Triton's statuses (its codes INVALID_ARG 400, NOT_FOUND 404, INTERNAL 500, UNAVAILABLE 503);
# its error bodies have no word for the kind.
ERRORS: ErrorTable = {
    Kind.VALIDATION: (400, ""),
    Kind.AUTH: (401, ""),
    Kind.PERMISSION: (403, ""),
    Kind.NOT_FOUND: (404, ""),
    Kind.TOO_LARGE: (400, ""),
    Kind.CLIENT_TIMEOUT: (408, ""),
    Kind.UNSUPPORTED: (400, ""),
    Kind.RATE_LIMIT: (503, ""),
    Kind.OVERLOADED: (503, ""),
    Kind.UPSTREAM: (500, ""),
    Kind.TIMEOUT: (500, ""),
    Kind.UNAVAILABLE: (503, ""),
    Kind.INTERNAL: (500, ""),
}


def body_of(body: bytes) -> dict[str, Any]:
    """The generate body, with the two fields every Triton LLM model requires checked."""
    data = load_object(body)
    rid = data.get("id")
    if rid is not None and not isinstance(rid, str):
        raise InvalidRequest("'id' must be a string", param="id", code="invalid_value")
    text = data.get("text_input")
    if text is None:
        raise InvalidRequest("missing required input 'text_input'", param="text_input", code="invalid_value")
    if not isinstance(text, str):
        raise InvalidRequest("'text_input' must be a string", param="text_input", code="invalid_value")
    return data


def read_generate(
    data: dict[str, Any], path: PathValues, stream: bool, merged: dict[str, Any], echo: bool = True
) -> tuple[Request, GenerateParameters]:
    """A generate request from its body and its parameters, already merged (see schema), and the
    parameters as validated. `exclude_input_in_output: false` asks for the prompt back (`echo`)
    in a whole answer, unless `echo` is off (a simulated server that answers so on its own)."""
    m = validate(GenerateParameters, merged)
    values = names.IN.read(m.__dict__)
    values["stop"] = words(m.stop)
    bad = words(m.bad_words)
    if bad:
        values["bad_words"] = bad
    held = from_guide(m.guided_decoding_guide_type, m.guided_decoding_guide) or from_vllm(None, m.structured_outputs)
    if held is not None:
        values["response_format"] = held
    if m.beam_width is not None and m.beam_width > 1:
        values["beam_width"] = m.beam_width
    if echo and m.exclude_input_in_output is False and not stream:
        values["echo"] = True
    if m.n is not None and m.n > 1:
        raise InvalidRequest(
            "num_return_sequences > 1 is not supported on this endpoint",
            param="num_return_sequences",
            code="invalid_value",
        )
    version = path.get("version")
    req = Request(
        task=Task.COMPLETION,
        wire=WIRE,
        model=path["model"],
        prompt=data["text_input"],
        stream=stream,
        params=neutral.make(values),
        raw=data,
        path_params={"version": version} if version else {},
    )
    return req, m


def words(value: str | list[str] | None) -> tuple[str, ...] | None:
    """A word list from a string or list; empty strings mean "none" (TRT-LLM examples send "")."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    kept = tuple(w for w in items if w)
    return kept or None


def _parse(stream: bool) -> Any:
    def parse(body: bytes, path: PathValues) -> Request:
        data = body_of(body)
        return read_generate(data, path, stream, merged_parameters(data))[0]

    return parse


def path_model(path: PathValues) -> str | None:
    return path["model"]


GENERATE = Endpoint(_parse(False), render.render_result, None, path_model)
GENERATE_STREAM = Endpoint(_parse(True), render.render_result, render.stream_renderer, path_model)

# What Triton answers for the readiness of a model it does not have (or not in that version).
_NOT_READY = Reply(400, jsonutil.dumps({"error": "Model version not ready"}))


def _triton_backend(route: RouteView) -> bool:
    return route.backend.dialect == WIRE and isinstance(route.backend.options, Options)


def _backend_path(route: RouteView, path: PathValues, tail: str = "") -> str | None:
    """The same path on the route's backend when that is a Triton server (its model name and,
    unless the client named one, its configured version), else None."""
    options = route.backend.options
    if not _triton_backend(route) or not isinstance(options, Options):
        return None
    out = "/v2/models/" + quote(route.backend.model or path["model"], safe="")
    version = path.get("version") or options.model_version
    if version:
        out += "/versions/" + quote(version, safe="")
    return out + tail


def _renamed(reply: Reply, name: str) -> Reply:
    """A backend's metadata or config under the name the client used."""
    if reply.status != 200 or reply.body is None:
        return reply
    try:
        obj = jsonutil.loads(reply.body)
    except jsonutil.JSONDecodeError:
        return reply
    if isinstance(obj, dict) and "name" in obj:
        obj["name"] = name
    return Reply(200, jsonutil.dumps(obj))


def _version_known(path: PathValues) -> None:
    """A model served from another dialect's backend has one version, "1"."""
    version = path.get("version")
    if version is not None and version != "1":
        raise NotFound(f"Request for unknown model: '{path['model']}' version {version} is not found")


async def live(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    return Reply(200)


async def ready(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    return Reply(200 if await group.ready(group.routes) else 400)


async def server_info(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    """`GET /v2`: the Triton server's own answer where one serves the group, else the gateway's."""
    for route in group.routes:
        if _triton_backend(route):
            try:
                reply = await group.fetch(route, "/v2")
            except GatewayError:
                continue  # that server is down: another may answer, else the gateway does
            if reply.status == 200:
                return Reply(200, reply.body)
    return Reply(body=jsonutil.dumps(server_metadata(__version__)))


async def metadata(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    model = path["model"]
    route = group.select(model)
    upstream = _backend_path(route, path)
    if upstream is not None:
        return _renamed(await group.fetch(route, upstream), model)
    _version_known(path)
    return Reply(body=jsonutil.dumps(model_metadata(model)))


async def config(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    model = path["model"]
    route = group.select(model)
    upstream = _backend_path(route, path, "/config")
    if upstream is not None:
        return _renamed(await group.fetch(route, upstream), model)
    _version_known(path)
    return Reply(body=jsonutil.dumps(model_config(model)))


async def model_ready(path: PathValues, group: GroupView, caller: Caller) -> Reply:
    try:
        route = group.select(path["model"])
    except NotFound:
        return _NOT_READY
    upstream = _backend_path(route, path, "/ready")
    if upstream is not None:
        try:
            reply = await group.fetch(route, upstream)
        except GatewayError:
            return _NOT_READY  # a server that cannot be reached has no ready model
        return Reply(200) if reply.status == 200 else _NOT_READY
    if path.get("version") not in (None, "1"):
        return _NOT_READY
    return Reply(200) if await group.ready([route]) else _NOT_READY


def _mounts() -> list[Mount]:
    out = [
        Mount("GET", "/v2/health/live", info=live, auth=False),
        Mount("GET", "/v2/health/ready", info=ready, auth=False),
    ]
    out.append(Mount("GET", "/v2", info=server_info))
    for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        out += [
            Mount("POST", base + "/generate", GENERATE),
            Mount("POST", base + "/generate_stream", GENERATE_STREAM),
            Mount("GET", base, info=metadata),
            Mount("GET", base + "/config", info=config),
            Mount("GET", base + "/ready", info=model_ready, auth=False),
        ]
    return out


class TritonInbound:
    mounts: Sequence[Mount] = tuple(_mounts())

    def error_reply(self, err: GatewayError) -> Reply:
        return Reply(stated(ERRORS, err)[0], jsonutil.dumps({"error": err.message}))
