"""The config's models: each section's keys, their defaults and bounds, and the checks one
section can make on its own."""

import ipaddress
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from gateway.adapters.toolcalls import PARSERS
from gateway.dialects import registry
from gateway.upstream import DIRECT, Egress, check_proxy, check_url


def _one_of(names: list[str]) -> str:
    quoted = [repr(n) for n in names]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else "".join(quoted)


def _backend_dialect(name: str) -> str:
    """A dialect with servers to talk to (the registry's list of names)."""
    if name not in registry.outbound_names():
        if name in registry.available():
            raise ValueError(f"the {name} dialect is spoken only by clients: a backend cannot speak it")
        raise ValueError(f"Input should be {_one_of(registry.outbound_names())}")
    return name


def _route_dialect(name: str) -> str:
    """A dialect clients speak (the registry's list of names)."""
    if name not in registry.inbound_names():
        if name in registry.available():
            raise ValueError(f"the {name} dialect is spoken only by servers: a route cannot take it")
        raise ValueError(f"Input should be {_one_of(registry.inbound_names())}")
    return name


def _tool_parser(name: str) -> str:
    if name not in PARSERS:
        raise ValueError(f"Input should be {_one_of(sorted(PARSERS))}")
    return name


BackendDialect = Annotated[str, AfterValidator(_backend_dialect)]
ToolParser = Annotated[str, AfterValidator(_tool_parser)]
RouteDialect = Annotated[str, AfterValidator(_route_dialect)]
# A header name is an HTTP token; a value holds no line break or NUL (which would smuggle in a
# header, or a request, of its own).
HeaderName = Annotated[str, StringConstraints(pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")]
HeaderValue = Annotated[str, StringConstraints(pattern=r"^[^\r\n\x00]*$")]
BackendURL = Annotated[str, AfterValidator(check_url)]  # http(s), or a unix socket (docs/upstream.md)


class ConfigError(Exception):
    """A config problem; `lines` are `key.path: problem` messages, one per problem."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TLSListen(_Strict):
    cert: str
    key: str
    client_ca: str | None = None  # set to require client certificates (mutual TLS)


class Listen(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    tls: TLSListen | None = None
    # Proxies (addresses or CIDR blocks) whose X-Forwarded-For names the client (log, limits).
    trusted_proxies: list[str] = Field(default_factory=list)

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        for item in v:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"not an IP address or CIDR block: {item!r}") from None
        return v

    def proxy_networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        return [ipaddress.ip_network(item, strict=False) for item in self.trusted_proxies]


class Auth(_Strict):
    api_keys_env: str | None = None
    api_keys: list[str] | None = None

    def keys(self) -> frozenset[str]:
        keys = set(self.api_keys or ())
        if self.api_keys_env:
            keys.update(k.strip() for k in os.environ.get(self.api_keys_env, "").split(",") if k.strip())
        return frozenset(keys)


class Limits(_Strict):
    """What one client, or all of them together, may cost the gateway (docs/configuration.md, limits)."""

    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0)
    # Upstream requests in flight at once, over every client: a fanned-out request counts each.
    max_concurrent_requests: int = Field(1024, gt=0)
    # Upstream requests one client request may open (prompts x choices, when fanned out).
    max_fanout: int = Field(16, gt=0)
    # From a connection's first byte (or from its opening) to the end of a request's headers.
    client_header_timeout_s: float = Field(10.0, gt=0)
    # From the end of the headers to the end of the body.
    client_body_timeout_s: float = Field(60.0, gt=0)
    # A body on its way is looked at every body_rate_grace_s from the headers on: each such stretch
    # must have brought this many bytes a second (408 once one has not).
    min_body_rate_bytes_s: int = Field(4096, gt=0)
    body_rate_grace_s: float = Field(10.0, gt=0)
    max_unfinished_bodies_per_client: int = Field(32, gt=0)  # the client as the access log names it
    client_keepalive_timeout_s: float = Field(75.0, gt=0)  # an idle keep-alive connection is closed then
    # All header lines of one request together.
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    # Request bodies held in memory at once, all clients together.
    max_buffered_body_bytes: int = Field(256 * 1024 * 1024, gt=0)
    # The most of one backend answer held at once: a whole answer's body (decoded), or what a
    # stream sends without finishing an event. Large embedding batches are the big answers.
    max_answer_bytes: int = Field(256 * 1024 * 1024, gt=0)
    max_buffered_answer_bytes: int = Field(512 * 1024 * 1024, gt=0)  # all answers at once, decoded

    @model_validator(mode="after")
    def _body_fits(self) -> "Limits":
        if self.max_buffered_body_bytes < self.max_body_bytes:
            raise ValueError("max_buffered_body_bytes must be at least max_body_bytes")
        return self


class Metrics(_Strict):
    path: str = "/metrics"
    port: int | None = Field(None, ge=0, le=65535)
    # Pool-member mode: the vLLM-named gauges the Inference Extension's endpoint picker reads
    # (running and waiting requests per backend, and the backend's own KV-cache use).
    model_server_gauges: bool = False

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must start with /")
        return v


class Logging(_Strict):
    """Log output: `json` writes one JSON object per line (access lines carry their fields)."""

    format: Literal["text", "json"] = "text"
    level: Literal["debug", "info", "warning", "error"] = "info"
    access_log: bool = True

    @field_validator("level", mode="before")
    @classmethod
    def _level(cls, v: Any) -> Any:
        return v.lower() if isinstance(v, str) else v


class BackendTLS(_Strict):
    """Upstream TLS: a CA bundle to trust, and a client certificate for mutual TLS (MindIE)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    verify: bool = True


class Backend(_Strict):
    dialect: BackendDialect
    url: BackendURL | None = None
    urls: list[BackendURL] | None = None
    simulate: bool = False
    model: str | None = None
    headers: dict[HeaderName, HeaderValue] = Field(default_factory=dict)
    # A whole answer, head and body, must come within timeout_s; a stream, its head and each gap.
    timeout_s: float = Field(600.0, gt=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    # The whole head, alone (unset: timeout_s); a whole answer's comes once it is generated.
    first_byte_timeout_s: float | None = Field(None, gt=0)
    # Further replicas tried for one request when one fails before answering; a pause of about
    # retry_backoff_s (jittered, doubling) before each.
    retries: int = Field(2, ge=0, le=10)
    retry_backoff_s: float = Field(0.05, ge=0)
    # Also try another replica after a reset or a timeout once the request was sent: the first
    # may then be generating the same answer, so this is for backends where that is harmless.
    retry_on_timeout: bool = False
    # A replica failing this many times in a row (connect failures, resets, timeouts, 5xx) is
    # left out for eject_base_s, doubling while it keeps failing, up to eject_max_s.
    eject_after: int = Field(3, ge=1)
    eject_base_s: float = Field(5.0, gt=0)
    eject_max_s: float = Field(120.0, gt=0)
    # Upstream requests in flight to this backend at once (unset: no limit of its own); more wait,
    # by priority then arrival, up to max_queued of them for queue_timeout_s; past that, 429.
    max_concurrent: int | None = Field(None, gt=0)
    max_queued: int = Field(256, ge=0)
    queue_timeout_s: float = Field(30.0, gt=0)
    # The longest a request may take from arrival to its last byte (unset: no such limit).
    max_duration_s: float | None = Field(None, gt=0)
    # Connections open to this backend at once (all replicas); more requests wait for one.
    max_connections: int = Field(256, gt=0)
    tokenizer: str | None = None
    # The format its model writes tool calls in (vLLM's --tool-call-parser names), for a backend
    # whose wire carries only text: the gateway renders tools into the prompt and reads the calls.
    tool_parser: ToolParser | None = None
    tls: BackendTLS | None = None
    # Where the backend's own Prometheus metrics are, for its KV-cache use in pool-member mode
    # (unset: where the dialect's servers usually have them, if they have a KV figure at all).
    metrics_url: BackendURL | None = None
    proxy: Annotated[str, AfterValidator(check_proxy)] | None = None  # a URL or none; unset: the environment's
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_target(self) -> "Backend":
        given = [k for k in ("url", "urls", "simulate") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("exactly one of url, urls, simulate must be set")
        self.egress(os.environ)  # the environment's proxy, when it is one the gateway cannot use
        return self

    def targets(self) -> list[str]:
        return [self.url] if self.url else list(self.urls or [])

    def egress(self, environ: Mapping[str, str]) -> Egress:
        """How its connections leave; in the process (simulated), directly."""
        return DIRECT if self.simulate else Egress.of(self.proxy, environ, [*self.targets(), self.metrics_url or ""])


class Shutdown(_Strict):
    """What SIGTERM does: /readyz says 503 at once; connections are still taken for
    drain_delay_s (so load balancers notice), then no more; requests in flight get grace_s to
    finish, and streams still open then end with their dialect's in-band error."""

    drain_delay_s: float = Field(5.0, ge=0)
    grace_s: float = Field(30.0, ge=0)


class Tracing(_Strict):
    """OpenTelemetry traces, exported over OTLP/HTTP (docs/operations.md, Tracing). Unset: off."""

    # The collector's traces URL (http://collector:4318/v1/traces); a bare http://host:port
    # gets OTLP's /v1/traces.
    otlp_endpoint: str
    # Of the traces that begin at the gateway; a client's traceparent keeps its own decision.
    sample_ratio: float = Field(1.0, ge=0, le=1)
    service_name: str = Field("llm-gateway", min_length=1)

    @field_validator("otlp_endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        m = re.match(r"^https?://[^/\s]+", v)
        if m is None:
            raise ValueError(f"not an http(s) URL: {v!r}")
        return v.rstrip("/") + "/v1/traces" if v[m.end() :] in ("", "/") else v


class ResponsesStore(_Strict):
    """What stateful inbound APIs keep between requests (the Responses API's stored responses):
    in this process, bounded by entries and bytes with the oldest let go first; or in Redis,
    shared by worker processes and replicas, each entry kept for `ttl_s`."""

    max_entries: int = Field(10_000, gt=0)
    max_bytes: int = Field(256 * 1024 * 1024, gt=0)
    redis_url: str | None = None
    ttl_s: float = Field(30 * 24 * 3600.0, gt=0)

    @field_validator("redis_url")
    @classmethod
    def _redis(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^(redis|rediss|unix)://", v):
            raise ValueError(f"not a redis://, rediss:// or unix:// URL: {v!r}")
        return v


class Route(_Strict):
    name: str = Field(min_length=1)
    dialect: RouteDialect
    backend: str
    models: list[str] | None = None
    prefix: str = ""

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if v and (not v.startswith("/") or v.endswith("/")):
            raise ValueError("must start with / and not end with /")
        return v


class Config(_Strict):
    listen: Listen = Field(default_factory=Listen)
    auth: Auth | None = None
    limits: Limits = Field(default_factory=Limits)
    metrics: Metrics = Field(default_factory=Metrics)
    logging: Logging = Field(default_factory=Logging)
    shutdown: Shutdown = Field(default_factory=Shutdown)
    tracing: Tracing | None = None
    responses_store: ResponsesStore = Field(default_factory=ResponsesStore)
    ui: bool = True  # the status page at /ui/ (on the metrics listener when metrics.port is set)
    # The priority of each InferenceObjective of the pool (its spec.priority: higher goes first),
    # by the name requests carry in the Inference Extension's objective header.
    inference_objectives: dict[str, int] = Field(default_factory=dict)
    backends: dict[str, Backend]
    routes: list[Route]

    @model_validator(mode="after")
    def _references(self) -> "Config":
        problems = reference_problems(self.backends, [(r.name, r.backend) for r in self.routes])
        if problems:
            raise ValueError("; ".join(problems))
        return self


def reference_problems(backends: Any, routes: list[tuple[Any, Any]]) -> list[str]:
    """Routes naming unknown backends, and duplicate route names: (name, backend) per route."""
    problems: list[str] = []
    seen: set[Any] = set()
    for i, (name, backend) in enumerate(routes):
        if isinstance(backend, str) and backend not in backends:
            problems.append(f"routes.{i}.backend: unknown backend {backend!r}")
        if isinstance(name, str) and name in seen:
            problems.append(f"routes.{i}.name: duplicate route name {name!r}")
        seen.add(name)
    return problems
