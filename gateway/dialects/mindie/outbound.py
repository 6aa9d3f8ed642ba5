"""Talking to a MindIE server by the best endpoint for each request.

Chat goes to its /v1/chat/completions, but for chat with tools on a backend that names its
model's tool-call format (`tool_parser:`): that goes to /infer as a prompt made by the chat
template, and the gateway reads the calls out of the text. Text and token-id completions go to
the native /infer or /infer_token unless they carry something only the OpenAI-flavoured
/v1/completions honours (stop strings, stop token ids, penalties, n, logprobs, a response
format...), or `options.prefer` is "openai".
Native routes reject temperature 0 and top_p 1.0, so greedy becomes `do_sample: false` and top_p
is left out at 1.0; an explicit max token count is always sent, since MindIE's defaults are tiny
(20 new tokens) or huge (maxIterTimes). Mutual TLS is the backend's generic `tls:` setting.
See docs/dialects/mindie.md.
"""

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway import jsonutil
from gateway.adapters import count_tokens
from gateway.adapters.prompt import prompt_text
from gateway.codec.capabilities import KvSource
from gateway.codec.contract import TEXT_PARTS, BackendView, Carriage, Outgoing, StreamParser, UpstreamCall
from gateway.codec.finish import FinishWords
from gateway.dialects.mindie import params as names
from gateway.dialects.mindie.reading import FullTextParser
from gateway.dialects.mindie.schema import TOKEN_ID_ABOVE, TOKEN_ID_MAX
from gateway.dialects.openai import params as openai_params
from gateway.dialects.openai import reading as openai_reading
from gateway.dialects.openai.outbound import message_dict, sampling_fields
from gateway.dialects.tgi import reading
from gateway.dialects.tgi.outbound import sampling
from gateway.modelserver import MINDIE_PAGE
from gateway.neutral.errors import InvalidRequest, Unsupported
from gateway.neutral.params import Fate, is_off
from gateway.neutral.types import Answer, Finish, Request, Task
from gateway.records import record


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # The server runs with fullTextEnabled: its OpenAI-route streams carry cumulative text.
    full_text: bool = False
    # Max new tokens sent when the client gave none.
    default_max_tokens: int = Field(1024, gt=0)
    # Which endpoint family completions use: native /infer[_token] when the request fits, or /v1/*.
    prefer: Literal["native", "openai"] = "native"


# Every MindIE route is one wire here: a MindIE client's request is translated for whichever
# route suits it, with the fate policy applied (docs/dialects/mindie.md).
WIRE = "mindie"
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
_SAMPLING = {"temperature": Fate.MAP, "top_p": Fate.MAP, "do_sample": Fate.MAP}
_NATIVE = names.NATIVE_OUT.fates(typical_p=Fate.MAP, **_SAMPLING)
INFER = "/infer"
_FATES = {
    "native": _NATIVE,
    # Chat as a prompt: the chat template takes its kwargs, the gateway cuts at stop strings.
    "chat": {
        **_NATIVE,
        "chat_template_kwargs": Fate.MAP,
        "stop": Fate.EMULATE,
        "include_stop_str_in_output": Fate.EMULATE,
    },
    COMPLETIONS: names.COMPLETIONS_OUT.fates(logprobs=Fate.MAP, top_logprobs=Fate.MAP, do_sample=Fate.MAP),
    CHAT: names.CHAT_OUT.fates(logprobs=Fate.MAP, top_logprobs=Fate.MAP, do_sample=Fate.MAP),
}
_MEDIA = ("image_url", "video_url", "audio_url")
# MindIE versions put either family's finish words on any route, and two of their own for a
# reason they could not tell (docs/dialects/mindie.md, Finish reasons).
FINISH_WORDS = (
    openai_params.FINISH_WORDS
    | reading.FINISH_WORDS
    | FinishWords(
        {
            "eos": Finish.EOS,
            "max_tokens": Finish.LENGTH,
            "invalid finishReason": Finish.UNKNOWN,
            "invalid flag": Finish.UNKNOWN,
        }
    )
)


def endpoint(req: Request, backend: BackendView[Options]) -> str:
    opts = backend.options
    if req.task is Task.CHAT:
        p = req.params
        if backend.tool_parser is not None and p.tools and p.tool_choice != "none":
            return INFER  # the tools emulated, in the prompt and read back from the text
        return CHAT
    if req.task is Task.EMBEDDING:
        raise Unsupported("MindIE backends do not serve embeddings", code="unsupported_task")
    p = req.params
    if opts.prefer == "openai" or any(not is_off(v) for n in names.OPENAI_ONLY if (v := getattr(p, n)) is not None):
        return COMPLETIONS
    return "/infer_token" if req.prompt_ids is not None else "/infer"


def _single(value: Any, what: str) -> Any:
    """MindIE takes one prompt per request (a string or a flat token-id list)."""
    if isinstance(value, list) and value and isinstance(value[0], (list, str)):
        if len(value) != 1:
            raise Unsupported(f"MindIE takes one {what} per request", param="prompt")
        return value[0]
    return value


def _token_ids(ids: list[int]) -> list[int]:
    """A prompt's ids as /infer_token takes them: within the manual's range, at most as many."""
    bad = next((i for i in ids if not TOKEN_ID_ABOVE < i <= TOKEN_ID_MAX), None)
    if bad is None and len(ids) <= TOKEN_ID_MAX:
        return ids
    what = f"token id {bad} in the prompt is" if bad is not None else f"a prompt of {len(ids)} token ids is"
    raise InvalidRequest(
        f"{what} more than MindIE's /infer_token takes: ids in ({TOKEN_ID_ABOVE}, {TOKEN_ID_MAX}], "
        f"at most {TOKEN_ID_MAX} of them",
        param="prompt",
        code="invalid_token_id",
    )


def _plain_media(message: dict[str, Any]) -> dict[str, Any]:
    """OpenAI `{"url": ...}` media parts to MindIE's plain strings."""
    parts = message.get("content")
    if not isinstance(parts, list):
        return message
    plain = []
    for p in parts:
        t = p.get("type")
        plain.append({**p, t: p[t].get("url")} if t in _MEDIA and isinstance(p.get(t), dict) else p)
    return {**message, "content": plain}


def native_body(req: Request, backend: BackendView[Options]) -> dict[str, Any]:
    p = req.params
    params = sampling(p, p.max_tokens or backend.options.default_max_tokens, names.NATIVE_OUT)
    params["details"] = True  # finish reason and token counts come only with details
    body: dict[str, Any] = {}
    if req.task is Task.CHAT:
        body["inputs"] = prompt_text(req, backend)
    elif req.prompt_ids is not None:
        body["input_id"] = _token_ids(_single(req.prompt_ids, "prompt"))
    else:
        body["inputs"] = _single(req.prompt, "prompt")
    body["stream"] = req.stream
    body["parameters"] = params
    return body


def openai_body(req: Request, model: str | None, opts: Options) -> dict[str, Any]:
    p = req.params
    body: dict[str, Any] = {"model": model}
    if req.task is Task.CHAT:
        body["messages"] = [_plain_media(message_dict(m)) for m in req.messages or ()]
        wire = names.CHAT_OUT
    else:
        body["prompt"] = _single(req.prompt_ids if req.prompt_ids is not None else req.prompt, "prompt")
        wire = names.COMPLETIONS_OUT
    body.update(sampling_fields(req.task, p, wire))
    body["max_tokens"] = p.max_tokens or opts.default_max_tokens
    if body.get("top_k") == 0:
        del body["top_k"]
    if "top_p" in body and body["top_p"] <= 1e-6:
        del body["top_p"]
    if req.stream:
        body["stream"] = True  # MindIE always puts usage in the last chunk: no stream_options
    return body


@record
class _State:
    req: Request
    full_text: bool
    prompt_tokens: int | None


class MindIEOutbound:
    options_model = Options
    shared_credentials = False
    batch_prompts = False
    forwards_same_wire = False

    def carriage(self, req: Request, backend: BackendView[Options]) -> Carriage:
        path = endpoint(req, backend)
        # Every MindIE endpoint finishes in the event with the last token.
        if path.startswith("/v1/"):
            return Carriage(_FATES[path], variant=path, finish_in_band=True, wire=WIRE)
        if req.task is Task.CHAT:
            return Carriage(
                _FATES["chat"], variant=path, finish_in_band=True, wire=WIRE, parts=TEXT_PARTS, templated=True
            )
        return Carriage(_FATES["native"], variant=path, finish_in_band=True, wire=WIRE)

    def build(self, out: Outgoing[Options]) -> UpstreamCall:
        req, backend = out.req, out.backend
        opts = backend.options
        path = out.variant or endpoint(req, backend)
        openai = path.startswith("/v1/")
        body = openai_body(req, backend.model or req.model, opts) if openai else native_body(req, backend)
        # The native routes report no prompt count: it is the input's length for /infer_token,
        # and the tokenizer's count (when configured) for /infer.
        if "input_id" in body:
            prompt_tokens: int | None = len(body["input_id"])
        elif isinstance(body.get("inputs"), str):
            prompt_tokens = count_tokens(backend, body["inputs"])
        else:
            prompt_tokens = None
        return UpstreamCall(path, jsonutil.dumps(body), req.stream, state=_State(req, opts.full_text, prompt_tokens))

    def parse_result(self, call: UpstreamCall, body: bytes, headers: Mapping[str, str]) -> Answer:
        st: _State = call.state
        if call.path.startswith("/v1/"):
            return openai_reading.parse_body(st.req, body, FINISH_WORDS)
        return reading.parse_object(jsonutil.loads(body), st.prompt_tokens, FINISH_WORDS)

    def stream_parser(self, call: UpstreamCall) -> StreamParser:
        st: _State = call.state
        if call.path.startswith("/v1/"):
            parser: StreamParser = openai_reading.OpenAIStreamParser(st.req.task is Task.CHAT, words=FINISH_WORDS)
            return FullTextParser(parser) if st.full_text else parser
        return reading.GenerateStreamParser(st.prompt_tokens, FINISH_WORDS)

    def error_message(self, status: int, body: bytes) -> str:
        return reading.error_message(status, body)

    def health_path(self, backend: BackendView[Options]) -> str:
        return "/health"

    def models_path(self, backend: BackendView[Options]) -> str:
        return "/v1/models"

    def kv_source(self, backend: BackendView[Options], urls: Sequence[str]) -> KvSource:
        """MindIE's metrics are on its management address and `metricsPort`, which only its own
        config knows: the backend's `metrics_url` says where."""
        return KvSource(MINDIE_PAGE, [])
