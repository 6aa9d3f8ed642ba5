"""Talking to a MindIE server by the best endpoint for each request.

Chat goes to its /v1/chat/completions. Text and token-id completions go to the native /infer or
/infer_token unless they carry something only the OpenAI-flavoured /v1/completions honours
(stop strings, stop token ids, penalties, n, logprobs...), or `options.prefer` is "openai".
Native routes reject temperature 0 and top_p 1.0, so greedy becomes `do_sample: false` and top_p
is left out at 1.0; an explicit max token count is always sent, since MindIE's defaults are tiny
(20 new tokens) or huge (maxIterTimes). Mutual TLS is the backend's generic `tls:` setting.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway import jsonutil
from gateway.adapters import count_tokens
from gateway.core.errors import Unsupported
from gateway.core.params import Fate
from gateway.core.routing import Backend
from gateway.core.types import EmbeddingResult, Event, Request, Result, Task, TextDelta
from gateway.dialects.base import StreamParser, UpstreamCall
from gateway.dialects.openai.outbound import OpenAIOutbound, OpenAIStreamParser, request_body
from gateway.dialects.tgi import reading
from gateway.dialects.tgi.outbound import tgi_parameters


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # The server runs with fullTextEnabled: its OpenAI-route streams carry cumulative text.
    full_text: bool = False
    # Max new tokens sent when the client gave none.
    default_max_tokens: int = Field(1024, gt=0)
    # Which endpoint family completions use: native /infer[_token] when the request fits, or /v1/*.
    prefer: Literal["native", "openai"] = "native"


_NATIVE_HINTS = ("top_k", "typical_p", "do_sample", "watermark", "priority", "timeout", "seed", "repetition_penalty")
_NATIVE_FATES: dict[str, Fate] = {name: Fate.MAP for name in _NATIVE_HINTS}
# What the OpenAI-flavoured routes take that the native ones lack: any of these moves a
# completion there.
_OPENAI_ONLY = (
    "stop",
    "stop_token_ids",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "ignore_eos",
    "presence_penalty",
    "frequency_penalty",
    "n",
    "best_of",
    "logprobs",
    "top_logprobs",
    "response_format",
)
_OPENAI_FATES: dict[str, Fate] = {
    name: Fate.MAP for name in (*_OPENAI_ONLY, "seed", "top_k", "repetition_penalty", "do_sample")
}
_CHAT_FATES: dict[str, Fate] = {
    **_OPENAI_FATES,
    **{name: Fate.MAP for name in ("tools", "tool_choice", "chat_template_kwargs")},
}
_MEDIA = ("image_url", "video_url", "audio_url")
_OPENAI = OpenAIOutbound()


def endpoint(req: Request, opts: Options) -> str:
    if req.task is Task.CHAT:
        return "/v1/chat/completions"
    if req.task is Task.EMBEDDING:
        raise Unsupported("MindIE backends do not serve embeddings", code="unsupported_task")
    if opts.prefer == "openai" or any(req.params.get(k) not in (None, False, []) for k in _OPENAI_ONLY):
        return "/v1/completions"
    return "/infer_token" if req.prompt_ids is not None else "/infer"


def _options(backend: Backend) -> Options:
    opts = backend.options
    return opts if isinstance(opts, Options) else Options()


def _single(value: Any, what: str) -> Any:
    """MindIE takes one prompt per request (a string or a flat token-id list)."""
    if isinstance(value, list) and value and isinstance(value[0], (list, str)):
        if len(value) != 1:
            raise Unsupported(f"MindIE takes one {what} per request", param="prompt")
        return value[0]
    return value


def _plain_media(messages: list[dict[str, Any]]) -> None:
    """OpenAI `{"url": ...}` media parts to MindIE's plain strings."""
    for m in messages:
        parts = m.get("content")
        if isinstance(parts, list):
            for p in parts:
                t = p.get("type")
                if t in _MEDIA and isinstance(p.get(t), dict):
                    p[t] = p[t].get("url")


def native_body(req: Request, opts: Options) -> dict[str, Any]:
    p = req.params
    params = tgi_parameters(p, p.get("max_tokens") or opts.default_max_tokens)
    for name in ("frequency_penalty", "truncate", "stop"):
        params.pop(name, None)  # not on the native routes
    if p.get("typical_p") == 1:
        params["typical_p"] = 1.0
    for name in ("priority", "timeout"):
        if name in p:
            params[name] = p[name]
    params["details"] = True  # finish reason and token counts come only with details
    body: dict[str, Any] = {}
    if req.prompt_ids is not None:
        body["input_id"] = _single(req.prompt_ids, "prompt")
    else:
        body["inputs"] = _single(req.prompt, "prompt")
    body["stream"] = req.stream
    body["parameters"] = params
    return body


def openai_body(req: Request, backend: Backend, opts: Options) -> dict[str, Any]:
    body = request_body(req, backend.model or req.model, vllm=True)
    body.pop("stream_options", None)  # MindIE always puts usage in the last chunk
    body.pop("max_completion_tokens", None)
    body["max_tokens"] = req.params.get("max_tokens") or opts.default_max_tokens
    if body.get("top_k") == 0:
        del body["top_k"]
    if "top_p" in body and body["top_p"] <= 1e-6:
        del body["top_p"]
    if "prompt" in body:
        body["prompt"] = _single(body["prompt"], "prompt")
    if "messages" in body:
        _plain_media(body["messages"])
    return body


class FullTextParser:
    """Cumulative text (fullTextEnabled) to deltas, by prefix-diff against what went out."""

    __slots__ = ("_inner", "_sent")

    def __init__(self, inner: StreamParser) -> None:
        self._inner = inner
        self._sent: dict[int, str] = {}

    def _diff(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            if type(ev) is TextDelta:
                assert isinstance(ev, TextDelta)
                sent = self._sent.get(ev.index, "")
                if ev.text.startswith(sent) and len(ev.text) > len(sent):
                    out.append(TextDelta(ev.text[len(sent) :], ev.index, ev.logprobs, ev.token_ids))
                    self._sent[ev.index] = ev.text
                # A text that is not an extension of what went out (a rewrite) cannot be unsent.
                continue
            out.append(ev)
        return out

    def feed(self, data: bytes) -> list[Event]:
        return self._diff(self._inner.feed(data))

    def close(self) -> list[Event]:
        return self._diff(self._inner.close())


@dataclass(slots=True)
class _State:
    req: Request
    full_text: bool
    prompt_tokens: int | None


class MindIEOutbound:
    name = "mindie"
    shared_credentials = False
    options_model: type[BaseModel] = Options

    def fates(self, backend: Backend, req: Request) -> Mapping[str, Fate]:
        path = endpoint(req, _options(backend))
        if path == "/v1/chat/completions":
            return _CHAT_FATES
        return _OPENAI_FATES if path == "/v1/completions" else _NATIVE_FATES

    def build(self, req: Request, backend: Backend) -> UpstreamCall:
        opts = _options(backend)
        path = endpoint(req, opts)
        body = openai_body(req, backend, opts) if path.startswith("/v1/") else native_body(req, opts)
        # The native routes report no prompt count: it is the input's length for /infer_token,
        # and the tokenizer's count (when configured) for /infer.
        if "input_id" in body:
            prompt_tokens: int | None = len(body["input_id"])
        elif isinstance(body.get("inputs"), str):
            prompt_tokens = count_tokens(backend, body["inputs"])
        else:
            prompt_tokens = None
        return UpstreamCall(path, jsonutil.dumps(body), req.stream, state=_State(req, opts.full_text, prompt_tokens))

    def parse_result(self, call: UpstreamCall, body: bytes) -> Result | EmbeddingResult:
        st: _State = call.state
        if call.path.startswith("/v1/"):
            return _OPENAI.parse_result(UpstreamCall(call.path, None, False, state=st.req), body)
        return reading.parse_object(jsonutil.loads(body), st.prompt_tokens)

    def stream_parser(self, call: UpstreamCall) -> StreamParser:
        st: _State = call.state
        if call.path.startswith("/v1/"):
            parser: StreamParser = OpenAIStreamParser(st.req.task is Task.CHAT)
            return FullTextParser(parser) if st.full_text else parser
        return reading.GenerateStreamParser(st.prompt_tokens)

    def error_message(self, status: int, body: bytes) -> str:
        return reading.error_message(status, body)

    def health_path(self, backend: Backend) -> str:
        return "/health"

    def models(self, body: bytes) -> list[str]:
        return _OPENAI.models(body)
