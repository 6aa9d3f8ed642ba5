"""The contract between dialects and the proxy: what a dialect provides and what it may rely on.

A dialect has an inbound side (the paths its clients call, parsing their bodies into the neutral
form, rendering answers and errors their way) and an outbound side (building requests for such a
server, reading its answers). Both are plain, I/O-free code: the proxy does the HTTP. This module
depends on nothing in the gateway but the neutral form, so every dialect can depend on it.
"""

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict

from gateway.neutral.errors import GatewayError
from gateway.neutral.events import Event
from gateway.neutral.params import Fate
from gateway.neutral.types import Answer, Request
from gateway.records import record


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


Opts = TypeVar("Opts", bound=BaseModel)
Opts_co = TypeVar("Opts_co", bound=BaseModel, covariant=True)


@record
class BackendView(Generic[Opts_co]):
    """What a codec may know of the backend it talks to: names, its options (of its dialect's
    own options model), its model files."""

    name: str
    dialect: str
    model: str | None
    options: Opts_co
    # The folder with the model's tokenizer.json and tokenizer_config.json, when configured.
    tokenizer: str | None = None
    # The format the model writes its tool calls in, for a wire that carries only text
    # (gateway.adapters.toolcalls: its names are vLLM's `--tool-call-parser` names).
    tool_parser: str | None = None


# ---- outbound ------------------------------------------------------------------------------


@record
class Carriage:
    """What an outbound codec does with one request: the parameters it maps or leaves to the
    gateway (any other takes its role's default fate), and whatever choice it made on the way
    (MindIE's endpoint), handed back to `build` so it is made once."""

    fates: Mapping[str, Fate]
    variant: str = ""
    # The backend says a choice is finished in the event carrying its last token (see
    # RenderContext.finish_in_band).
    finish_in_band: bool = False
    # The wire API the request goes out on (openai.chat, tgi...): a client that spoke the
    # same one (Request.wire) is the backend's own client, whose body the backend may get as it is.
    wire: str = ""
    # The types of chat content part the wire carries (None: any, as they are); a message with
    # a part of another type is refused, never sent without it.
    parts: frozenset[str] | None = None
    # Chat goes out as one text prompt, made by the backend's chat template: the request's tools
    # are rendered into it, and the calls read back out of the model's text, when the backend
    # names its model's tool-call format (BackendView.tool_parser).
    templated: bool = False


# The parts of a wire that carries text only.
TEXT_PARTS = frozenset({"text"})


@record
class Outgoing(Generic[Opts_co]):
    """One request as a backend is to get it, for `Outbound.build`."""

    req: Request  # parameters as the fate policy left them
    backend: BackendView[Opts_co]
    request_id: str
    # The client spoke this backend's own wire, so the fields in `req.raw` are the backend's.
    same_wire: bool
    variant: str = ""


@record
class UpstreamCall:
    """One HTTP request to a backend, built by an outbound codec."""

    path: str  # appended to the backend's base URL
    body: bytes | None
    stream: bool
    method: str = "POST"
    headers: Mapping[str, str] | None = None
    # The backend's answer (body, or stream frames) may go to the client as it is.
    passthrough: bool = False
    # On a pass-through, the model name (JSON bytes) the client used, where the backend knows
    # the model by another: the answer is to say the client's.
    rename: bytes | None = None
    # Codec-private context for the response parser (requested options, prompt, counters).
    state: Any = None
    # Work the answer needs that the request does not (counting the prompt's tokens): done
    # while the backend answers, once the request is on its way, so that it adds nothing to
    # the wait. It may be called again; it does its work once.
    meanwhile: Callable[[], None] | None = None


class StreamParser(Protocol):
    """Sans-IO: upstream body bytes in, neutral events out. Raises UpstreamError on a fault."""

    def feed(self, data: bytes) -> list[Event]: ...

    def close(self) -> list[Event]: ...


class Outbound(Protocol[Opts]):
    """The half of a dialect that talks to its servers. `Opts` is the model of the `options:` a
    backend of this dialect takes (NoOptions for none). It may also have capabilities
    (gateway.codec.capabilities), and `Imitates` below."""

    options_model: type[Opts]
    # The backend's credentials reach other models than the configured one (a Databricks
    # workspace token opens every endpoint of the workspace), and the requested model picks among
    # them: a backend without `model:` must then have its routes list the `models:` clients may name.
    shared_credentials: bool
    # A list of prompts goes upstream in one request (else the proxy fans it out).
    batch_prompts: bool
    # A client speaking this wire has its body forwarded as it is (only the model rewritten) and
    # the answer handed back as it came; else the request is translated like any other.
    forwards_same_wire: bool

    def carriage(self, req: Request, backend: BackendView[Opts]) -> Carriage: ...

    def build(self, out: Outgoing[Opts]) -> UpstreamCall: ...

    def parse_result(self, call: UpstreamCall, body: bytes, headers: Mapping[str, str]) -> Answer: ...

    def stream_parser(self, call: UpstreamCall) -> StreamParser: ...

    def error_message(self, status: int, body: bytes) -> str:
        """The human message inside the backend's error body (or a cleaned-up raw body)."""
        ...

    def health_path(self, backend: BackendView[Opts]) -> str: ...


class EventStream(Protocol):
    """Neutral events as an upstream produces them, batch by batch."""

    async def next(self) -> list[Event] | None:
        """The next batch of events; None at the end. Raises GatewayError on a fault."""
        ...

    async def aclose(self) -> None: ...


# ---- inbound -------------------------------------------------------------------------------


class StreamRenderer(Protocol):
    """Neutral events in, bytes for the client out. A renderer may also have capabilities
    (gateway.codec.capabilities: `Pings`, `Keeps`)."""

    content_type: str

    def start(self) -> bytes: ...

    def render(self, events: list[Event]) -> bytes: ...

    def error(self, err: GatewayError) -> bytes:
        """An in-band error after the response headers went out."""
        ...

    def end(self) -> bytes:
        """The stream's terminator (empty for dialects that end by closing)."""
        ...


@record
class RenderContext:
    """What a renderer needs besides the result: ids and names in the client's convention."""

    request_id: str
    created: int
    model: str
    # The answer comes from a backend of the client's own wire and is handed over as it came.
    passthrough: bool = False
    # time.perf_counter() when the request arrived, for timings a dialect reports (MindIE's
    # prefill_time is the client's time to first token).
    started: float = 0.0
    # The model name the backend's config gives, if any.
    backend_model: str | None = None
    # The backend says a choice is finished in the event that carries its last token (so a
    # renderer that must send the last token with the finish need not hold each token back).
    finish_in_band: bool = True


# Values the router read from the request path ({model}, {name}, {version}...).
PathValues = Mapping[str, str]


class StateStore(Protocol):
    """Where an inbound dialect keeps what its API keeps between requests (the Responses API's
    stored responses), by owner: one owner's entries are never another's. Bounded; an entry may
    be let go (oldest first) to make room, so a dialect treats a missing entry as unknown."""

    async def get(self, owner: str, key: str) -> bytes | None: ...

    async def put(self, owner: str, key: str, value: bytes) -> None: ...

    async def delete(self, owner: str, key: str) -> bool:
        """Whether there was such an entry."""
        ...


@record
class Caller:
    """Who asks, as the layers below the HTTP handler know them, and what may be kept for them."""

    request_id: str
    # Whose state it is: the API key's name in the log, or "" with auth off (one owner for all).
    owner: str
    store: StateStore


@record
class Endpoint:
    """One inference path of an inbound dialect, served by the proxy's exchange handler."""

    parse: Callable[[bytes, PathValues], Request]
    render_result: Callable[[Answer, Request, RenderContext], bytes]
    stream_renderer: Callable[[Request, RenderContext], StreamRenderer] | None
    # Picks the requested model (or route key) out of the path when the dialect puts it there.
    path_model: Callable[[PathValues], str | None] | None = None
    content_type: str = "application/json"
    # Response headers of the dialect's own, from the whole answer (None for a stream).
    headers: Callable[[Answer | None, RenderContext], Mapping[str, str]] | None = None
    # An API that keeps state: the request completed with what is kept for the caller (an earlier
    # turn it names) before it is planned; and, after a whole answer, what is kept of it.
    prepare: Callable[[Request, Caller], Awaitable[Request]] | None = None
    keep: Callable[[Request, Answer, RenderContext, Caller], Awaitable[None]] | None = None


@record
class Reply:
    """A small answer of an inbound dialect's own (health, model lists, errors)."""

    status: int = 200
    body: bytes | None = None
    content_type: str = "application/json"


@record
class RouteView:
    name: str
    backend: BackendView[Any]
    # The model names clients may ask this route for, when its config lists them.
    models: frozenset[str] | None = None

    def exposed(self) -> list[str]:
        """The names clients know this route's model by: its `models`, else the backend's model."""
        if self.models:
            return sorted(self.models)
        return [self.backend.model] if self.backend.model else [self.name]


class GroupView(Protocol):
    """The routes of one dialect under one prefix, as an inbound dialect's own paths see them."""

    @property
    def routes(self) -> Sequence[RouteView]: ...

    def select(self, model: str | None) -> RouteView:
        """The route serving `model`; NotFound when none does."""
        ...

    def model_ids(self) -> list[str]: ...

    async def ready(self, routes: Sequence[RouteView]) -> bool:
        """Whether every backend of these routes has a ready replica."""
        ...

    async def fetch(self, route: RouteView, path: str) -> Reply:
        """GET `path` from the route's backend: its status and body, whatever the status (a
        dialect relays the backend's own metadata). UpstreamError when no answer came."""
        ...

    async def model_list(self, route: RouteView) -> Reply | None:
        """The backend's own OpenAI-shaped model list (its dialect `ListsModels`); None when its
        servers keep none. UpstreamError when no answer came."""
        ...


# A path of the dialect's own that is not an inference call: health, model lists, metadata, what
# a stateful API keeps. It may raise GatewayError; the proxy turns that into the dialect's error.
InfoHandler = Callable[[PathValues, GroupView, Caller], Awaitable[Reply]]


@record
class Asked:
    """What a client sent to a path of the dialect's own that reads more than its path."""

    path: PathValues
    query: Mapping[str, str]
    # The body (read within the gateway's limits), empty for a GET or a DELETE.
    body: bytes = b""


# Such a path that reads the query or a body (a stateful API's lookups, a token count); its errors
# as an InfoHandler's.
ReadingHandler = Callable[[Asked, GroupView, Caller], Awaitable[Reply]]


@record
class Mount:
    method: str
    path: str  # under the route's prefix
    endpoint: Endpoint | None = None
    info: InfoHandler | None = None
    # Whether the path needs the gateway's API key when auth is on (health paths do not).
    auth: bool = True
    reads: ReadingHandler | None = None


class Inbound(Protocol):
    """The half of a dialect that its clients speak: the paths it mounts, its error bodies. It
    may also have capabilities (gateway.codec.capabilities: `OwnKeyHeaders`)."""

    mounts: Sequence[Mount]

    def error_reply(self, err: GatewayError) -> Reply: ...


@runtime_checkable
class Imitates(Protocol):
    """An outbound whose servers differ in ways its inbound does not show (Triton's backend
    families): a simulated server of it answers as the server its options name does."""

    def imitation(self, options: Any) -> Inbound: ...


@record
class Demo:
    """How the embedded default config (every dialect mounted, on simulated backends) mounts
    this dialect's clients: under `prefix`, answered by a simulated server of `backend` (a
    dialect name; "" for its own)."""

    prefix: str = ""
    backend: str = ""
    # A simulated server of this dialect that carries only text: its model writes tool calls in
    # this format (a `tool_parser:` name), and its backend is given that and the demo model's
    # chat template, so tools work through it.
    tool_parser: str = ""
    # Clients of other dialects the default sends to this dialect's simulated server too: (their
    # dialect, the prefix they are mounted under); an OpenAI chat in front of a text-only server.
    fronts: tuple[tuple[str, str], ...] = ()


@record
class Dialect:
    """A dialect: either half may be absent (an API only clients speak, or only servers)."""

    name: str
    inbound: Inbound | None = None
    outbound: "Outbound[Any] | None" = None
    demo: Demo = Demo()

    def server(self, options: Any) -> Inbound | None:
        """What a simulated server of this dialect, with these backend options, serves."""
        if isinstance(self.outbound, Imitates):
            return self.outbound.imitation(options)
        return self.inbound
