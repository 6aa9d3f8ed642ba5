"""The OpenAI Responses API (`POST /v1/responses` and what it keeps).

Its clients call it on the paths of every OpenAI route (`inbound.MOUNTS`, which the OpenAI
dialect mounts beside its own; its error bodies are OpenAI's), translated to any backend through
the neutral form; a backend that serves it itself gets the body as it is. As a backend dialect
(`dialect: responses`) it is a server that speaks only this API. Besides the files every dialect
has: `items.py` reads input items into chat messages, `stream.py` renders streams live,
`stored.py` is what is kept of a response and `state.py` the paths that read it. See
docs/dialects/responses.md.
"""

from gateway.codec.contract import Dialect
from gateway.dialects.responses.inbound import MOUNTS
from gateway.dialects.responses.outbound import ResponsesOutbound

DIALECT = Dialect("responses", outbound=ResponsesOutbound())

__all__ = ["DIALECT", "MOUNTS"]
