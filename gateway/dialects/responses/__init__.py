"""The OpenAI Responses API (`POST /v1/responses` and what it keeps).

Its clients call it on the paths of every OpenAI route (`MOUNTS`, which the OpenAI dialect mounts
beside its own; its error bodies are OpenAI's), translated to any backend through the neutral
form; a backend that serves it itself gets the body as it is. As a backend dialect
(`dialect: responses`) it is a server that speaks only this API. Besides the files every dialect
has: `stream.py` renders streams live, `stored.py` is what is kept of a response, `state.py` the
paths that read it. See docs/dialects/responses.md.
"""

from collections.abc import Sequence

from gateway.codec.contract import Dialect, Endpoint, Mount
from gateway.dialects.responses import inbound, render, state, stream
from gateway.dialects.responses.outbound import ResponsesOutbound

CREATE = Endpoint(inbound.parse, render.render_result, stream.stream_renderer, prepare=inbound.prepare, keep=state.keep)
MOUNTS: Sequence[Mount] = (
    Mount("POST", "/v1/responses", CREATE),
    Mount("POST", "/v1/responses/input_tokens", reads=state.input_tokens),
    Mount("GET", "/v1/responses/{response_id}", reads=state.retrieve),
    Mount("DELETE", "/v1/responses/{response_id}", reads=state.delete),
    Mount("GET", "/v1/responses/{response_id}/input_items", reads=state.input_items_list),
    Mount("POST", "/v1/responses/{response_id}/cancel", reads=state.cancel),
)

DIALECT = Dialect("responses", outbound=ResponsesOutbound())
