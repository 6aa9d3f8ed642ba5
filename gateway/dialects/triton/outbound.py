"""Talking to a server with Triton's generate extension: TRT-LLM, vLLM backend or MindIE.

`options.flavor` says which one. Generate is text in, text out: chat requests are turned into a
prompt with the model's chat template, so they need the backend's `tokenizer:` folder. A Triton
client on a Triton backend has its body forwarded as it is (it already speaks that server's
parameter names); only the model in the path changes. See docs/dialects/triton.md.
"""

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import quote

from yarl import URL

from gateway import jsonutil
from gateway.adapters import Tokenizer, optional_tokenizer
from gateway.adapters.prompt import prompt_text
from gateway.codec.capabilities import KvSource
from gateway.codec.contract import TEXT_PARTS, BackendView, Carriage, Inbound, Outgoing, UpstreamCall
from gateway.dialects.triton.flavors import FLAVORS, Flavor
from gateway.dialects.triton.reading import CallState, TritonStreamParser, error_body_text, parse_body
from gateway.dialects.triton.schema import Options
from gateway.dialects.triton.simulated import SimulatedTriton
from gateway.neutral.errors import InvalidRequest, Unsupported
from gateway.neutral.types import Answer, Request, Task

WIRE = "triton"
# Triton serves its metrics on a port of their own (tritonserver --metrics-port, 8002 by default).
METRICS_PORT = 8002

# A Triton model is named by its folder in the model repository; MindIE's variant checks the name
# against [\w\-.]+. A client-chosen name becomes a path segment, so it is held to that rule (and
# "." or ".." are refused, or the URL would resolve them).
_MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")


def client_model_name(name: str | None) -> str:
    if name is None or not _MODEL_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidRequest(
            f"{name!r} is not a valid Triton model name (letters, digits, '_', '-' and '.')",
            param="model",
            code="invalid_value",
        )
    return name


def flavor_of(backend: BackendView[Options]) -> Flavor:
    return FLAVORS[backend.options.flavor]


@functools.lru_cache(maxsize=256)
def generate_path(model: str, version: str | None, stream: bool) -> str:
    """The generate path of a model (and version); remembered, as routes ask for few."""
    base = "/v2/models/" + quote(model, safe="")
    if version:
        base += "/versions/" + quote(version, safe="")
    return base + ("/generate_stream" if stream else "/generate")


def _prompt_count(st: CallState, tok: Tokenizer | None, asked: bool) -> Callable[[], None] | None:
    """What counts the prompt while the backend answers, unless the server was asked to report
    the count itself (the vLLM backend's num_input_tokens) or there is no tokenizer."""
    st.tokenizer = tok
    return st.count_prompt if tok is not None and not asked else None


class TritonOutbound:
    options_model = Options
    shared_credentials = False
    batch_prompts = False
    forwards_same_wire = True

    def carriage(self, req: Request, backend: BackendView[Options]) -> Carriage:
        flavor = flavor_of(backend)
        # Generate takes one text: chat is a prompt made by the chat template.
        return Carriage(flavor.fates, finish_in_band=flavor.finish_in_band, wire=WIRE, parts=TEXT_PARTS, templated=True)

    def build(self, out: Outgoing[Options]) -> UpstreamCall:
        req, backend = out.req, out.backend
        opts = backend.options
        flavor = flavor_of(backend)
        if req.task is Task.EMBEDDING:
            raise Unsupported(
                f"backend {backend.name!r} (triton generate) cannot compute embeddings", code="unsupported_task"
            )
        model = backend.model or client_model_name(req.model)
        # The version the client named, else the configured one, if any.
        path = generate_path(model, req.path_params.get("version") or opts.model_version, req.stream)
        if out.same_wire and req.raw is not None:
            # The client speaks this server's wire: its body goes as it is, and the answer comes
            # back as it is, but for the model's name when the route exposes another.
            raw = req.raw
            details = raw.get("details", (raw.get("parameters") or {}).get("details"))
            st = CallState(flavor.reading, raw.get("text_input") or "", req.params.max_tokens)
            st.expect_final = flavor.final_details and details is True
            st.passthrough = True
            if req.model is not None and req.model != model:
                st.rename = jsonutil.dumps(req.model)
            count = _prompt_count(st, optional_tokenizer(backend), asked=bool(raw.get("return_num_input_tokens")))
            return UpstreamCall(path, jsonutil.dumps(raw), req.stream, passthrough=True, state=st, meanwhile=count)
        prompt = prompt_text(req, backend)
        p = req.params
        max_tokens = p.max_tokens or opts.default_max_tokens
        sent = p if max_tokens == p.max_tokens else p.replace(max_tokens=max_tokens)
        body = flavor.body(sent, out.request_id, prompt, req.stream, opts.count_tokens)
        st = CallState(flavor.reading, prompt, max_tokens)
        st.stops_requested = bool(p.stop)
        st.expect_final = flavor.final_details
        if flavor.keeps_stop_words and p.stop and not p.include_stop_str_in_output:
            st.strip_stops = list(p.stop)
        count = _prompt_count(st, optional_tokenizer(backend), asked=flavor.counts_prompt)
        return UpstreamCall(path, jsonutil.dumps(body), req.stream, state=st, meanwhile=count)

    def parse_result(self, call: UpstreamCall, body: bytes, headers: Mapping[str, str]) -> Answer:
        return parse_body(call.state, body)

    def stream_parser(self, call: UpstreamCall) -> TritonStreamParser:
        return TritonStreamParser(call.state)

    def error_message(self, status: int, body: bytes) -> str:
        return error_body_text(body)

    def health_path(self, backend: BackendView[Options]) -> str:
        if flavor_of(backend).probe_liveness:
            return "/v2/health/live"
        if not backend.model:
            return "/v2/health/ready"
        return "/v2/models/" + quote(backend.model, safe="") + "/ready"

    def kv_source(self, backend: BackendView[Options], urls: Sequence[str]) -> KvSource:
        """Each replica's metrics port (a unix socket has no ports: such a backend needs its
        `metrics_url`)."""
        tcp = [URL(u) for u in urls if URL(u).scheme in ("http", "https")]
        pages = [(str(u.with_port(METRICS_PORT).with_path("/", keep_query=True)), "/metrics") for u in tcp]
        return KvSource(flavor_of(backend).page, pages)

    def imitation(self, options: Options) -> Inbound:
        return SimulatedTriton(FLAVORS[options.flavor].imitation)
