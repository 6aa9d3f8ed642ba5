"""MindIE's native /infer and /infer_token: request parsing, whole answers and SSE streams.

Stream events carry `prefill_time` (first token) or `decode_time` (later ones) in milliseconds,
measured by the gateway as tokens arrive; the final event holds the last token with a null
text, `generated_text` and `details` (seed 000).
"""

from typing import Any

from aiohttp import web

from gateway import jsonutil
from gateway.core.errors import GatewayError
from gateway.core.finish import TGI as FINISH
from gateway.core.types import EmbeddingResult, Finish, Request, Result, Task, TextDelta
from gateway.core.validation import load_object, validate
from gateway.dialects.base import RenderContext
from gateway.dialects.mindie.schema import InferRequest
from gateway.dialects.tgi import wire

MINDIE_DEFAULT_MAX_NEW_TOKENS = 20  # seed 000


def raw_error(err: GatewayError) -> bytes:
    """MindIE reports a failure after the stream began as a raw text line, not an SSE event."""
    return err.message.replace("\n", " ").encode() + b"\n"


NATIVE = wire.Flavour(
    name="mindie-native",
    space=True,
    index=False,
    prompt_sep=" ",
    prompt_tokens=False,
    input_length=False,
    detail_tokens_null=True,
    unknown_id=None,
    error_frame=raw_error,
)


def parse_infer(body: bytes, request: web.Request | None = None) -> Request:
    data = load_object(body)
    m = validate(InferRequest, data)
    params = wire.neutral_params(m.parameters)
    params.setdefault("max_tokens", MINDIE_DEFAULT_MAX_NEW_TOKENS)
    req = Request(
        task=Task.COMPLETION, inbound="mindie", stream=bool(m.stream), params=params, raw=data, wants_token_ids=True
    )
    if m.input_id is not None:
        req.prompt_ids = list(m.input_id)
    else:
        req.prompt = m.inputs
    return req


def _details(finish: Finish | None, generated: int, ids: list[int] | None, seed: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"finish_reason": FINISH[finish or Finish.EOS], "generated_tokens": generated}
    if ids:
        d["generated_token_ids"] = ids
    d["seed"] = seed
    return d


def render_infer(result: Result | EmbeddingResult, req: Request, ctx: RenderContext) -> bytes:
    assert isinstance(result, Result)
    c = result.choices[0]
    out: dict[str, Any] = {"generated_text": c.text}
    if wire.wants_details(req):
        u = result.usage
        generated = u.completion_tokens if u and u.completion_tokens is not None else len(c.token_ids or ())
        out["details"] = _details(c.finish, generated, c.token_ids, req.params.get("seed"))
    return jsonutil.dumps(out)


class NativeStreamRenderer(wire.HoldBackRenderer):
    def __init__(self, req: Request, ctx: RenderContext) -> None:
        super().__init__(NATIVE, req, ctx)
        self._first = True

    def _timing(self, ms: float) -> dict[str, Any]:
        first, self._first = self._first, False
        return {"prefill_time": ms, "decode_time": None} if first else {"prefill_time": None, "decode_time": ms}

    def token_event(self, d: TextDelta, ms: float) -> dict[str, Any]:
        return self._timing(ms) | {"token": {"id": wire.ids_value(d.token_ids, None), "text": d.text}}

    def final_event(
        self, last: TextDelta | None, ms: float, text: str, details: dict[str, Any] | None
    ) -> dict[str, Any]:
        timing = self._timing(ms) if last is not None else {"prefill_time": None, "decode_time": None}
        return timing | {
            "generated_text": text,
            "details": details,
            "token": {"id": wire.ids_value(last.token_ids if last else None, None), "text": None},
        }
