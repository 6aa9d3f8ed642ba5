"""What an explanation holds: plain records, rendered as text or JSON (gateway.explain.render)."""

from typing import Any

from gateway.records import record


@record
class ParamFate:
    """One parameter the client set, and what becomes of it."""

    name: str  # the gateway's neutral name (docs/dialects name each dialect's field for it)
    value: Any  # as the client set it, in JSON's terms
    # map, emulate, drop, refuse; "off" (set to its off value, so left out) or "forward" (a
    # pass-through: the body goes as it is).
    fate: str
    # The upstream body's fields that carry it, by dotted path (map, emulate).
    wire: tuple[str, ...]
    why: str


@record
class Fanout:
    """How many upstream requests the client's one request takes, and why."""

    requests: int  # 0 when the request is refused before it is planned
    prompts: int
    choices: int  # the choices asked for one request each (n, when the backend gives one)
    why: str


@record
class Upstream:
    """One request as it would go to the backend."""

    method: str
    url: str | None  # without credentials or query values; None for a simulated backend
    target: str  # the request line's target
    headers: tuple[tuple[str, str], ...]  # in the order sent, credentials' values hidden
    body: bytes | None
    stream: bool
    proxy: str | None = None  # the egress proxy it goes through, without its credentials


@record
class ClientError:
    """The error the client would get, exactly."""

    status: int
    content_type: str
    body: bytes


@record(kw_only=True)
class Explanation:
    route: str
    dialect: str  # the client's
    path: str
    backend: str
    backend_dialect: str
    model: str | None  # the backend's configured model
    simulated: bool
    request_id: str
    passthrough: bool
    params: tuple[ParamFate, ...]
    stops: tuple[str, ...] | None  # the stop strings the gateway enforces itself
    include_stop: bool  # whether the stop text stays in the output
    fanout: Fanout
    prompt: str | None  # the chat template's rendering, where one is used
    upstream: tuple[Upstream, ...]
    dropped: str  # the client's X-Gateway-Dropped-Params ("" for none)
    error: ClientError | None
    notes: tuple[str, ...]
