"""What a dialect provides: an inbound side (routes clients call) and an outbound side (how to
talk to such a server). The core sees dialects only through these interfaces.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from gateway.core.errors import GatewayError
from gateway.core.params import Fate
from gateway.core.types import EmbeddingResult, Event, Request, Result

if TYPE_CHECKING:
    from gateway.core.routing import Backend, RouteGroup


# On a simulator's app: the validated options describing the server it imitates.
SIMULATED_SERVER = web.AppKey("simulated_server", BaseModel)


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- outbound ------------------------------------------------------------------------------


@dataclass(slots=True)
class UpstreamCall:
    """One HTTP request to a backend, built by an outbound codec."""

    path: str  # appended to the backend's base URL
    body: bytes | None
    stream: bool
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    # Same-dialect exchange: the client's dialect can take the upstream body/frames as they are.
    passthrough: bool = False
    # Codec-private context for the response parser (requested options, prompt, counters).
    state: Any = None
    # Filled in by the engine before a whole answer is parsed (some servers put counts there).
    response_headers: Mapping[str, str] | None = None


class StreamParser(Protocol):
    """Sans-IO: upstream body bytes in, neutral events out. Raises UpstreamError on a fault."""

    def feed(self, data: bytes) -> list[Event]: ...

    def close(self) -> list[Event]: ...


class Outbound(Protocol):
    name: str
    options_model: type[BaseModel]
    # The backend's credentials reach other models than the configured one (a Databricks
    # workspace token opens every endpoint of the workspace), and the requested model picks among
    # them: a backend without `model:` must then have its routes list the `models:` clients may name.
    shared_credentials: bool

    def fates(self, backend: "Backend", req: Request) -> Mapping[str, Fate]: ...

    def build(self, req: Request, backend: "Backend") -> UpstreamCall: ...

    def parse_result(self, call: UpstreamCall, body: bytes) -> Result | EmbeddingResult: ...

    def stream_parser(self, call: UpstreamCall) -> StreamParser: ...

    def error_message(self, status: int, body: bytes) -> str:
        """The human message inside the backend's error body (or a cleaned-up raw body)."""
        ...

    def health_path(self, backend: "Backend") -> str: ...

    def models(self, body: bytes) -> list[str]:
        """Model ids from the backend's model list (used by readiness and /v1/models)."""
        ...


# ---- inbound -------------------------------------------------------------------------------


class StreamRenderer(Protocol):
    """Neutral events in, bytes for the client out."""

    content_type: str

    def start(self) -> bytes: ...

    def render(self, events: list[Event]) -> bytes: ...

    def error(self, err: GatewayError) -> bytes:
        """An in-band error after the response headers went out."""
        ...

    def end(self) -> bytes:
        """The stream's terminator (empty for dialects that end by closing)."""
        ...


@dataclass(slots=True)
class RenderContext:
    """What a renderer needs besides the result: ids and names in the client's convention."""

    request_id: str
    created: int
    model: str
    passthrough: bool = False
    # time.perf_counter() when the request arrived, for timings a dialect reports (MindIE's
    # prefill_time is the client's time to first token).
    started: float = 0.0
    # Set only when a simulator serves the request: the options of the server it imitates (the
    # dialect's backend `options_model`), so a renderer can answer as that server would.
    server: BaseModel | None = None


@dataclass(slots=True)
class Endpoint:
    """One inference path of an inbound dialect, wired by the core's exchange handler."""

    parse: Callable[[bytes, web.Request], Request]
    render_result: Callable[[Result | EmbeddingResult, Request, RenderContext], bytes]
    stream_renderer: Callable[[Request, RenderContext], StreamRenderer] | None
    # Picks the requested model (or route key) out of the path when the dialect puts it there.
    path_model: Callable[[web.Request], str | None] | None = None
    content_type: str = "application/json"


class Inbound(Protocol):
    name: str

    def paths(self) -> list[tuple[str, str]]:
        """(method, path) pairs this dialect mounts, for check-config and collision checks."""
        ...

    def mount(self, router: web.UrlDispatcher, prefix: str, group: "RouteGroup") -> None: ...

    def error_response(self, err: GatewayError) -> web.Response: ...


@dataclass(slots=True)
class Dialect:
    name: str
    inbound: Inbound
    outbound: Outbound
