"""The config: pydantic models, `${VAR}` expansion, the checks, and one-line error messages.
Reading it from a file (or making the embedded default) is gateway.configfile's.

The shape is the contract the README's Configuration section shows. Dialect-specific `options`
are validated by the dialect's own options model, so an unknown option is a config error.
"""

import ipaddress
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator
from pydantic.functional_validators import AfterValidator

from gateway.dialects import registry
from gateway.upstream import DIRECT, Egress, check_proxy, check_url

DialectName = Literal["openai", "mindie", "tgi", "triton", "databricks"]
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
    """What one client, or all of them together, may cost the gateway (README, Operations)."""

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
    # An idle keep-alive connection is closed after this long.
    client_keepalive_timeout_s: float = Field(75.0, gt=0)
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
    dialect: DialectName
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
    """OpenTelemetry traces, exported over OTLP/HTTP (README, Operations: Tracing). Unset: off."""

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


class Route(_Strict):
    name: str = Field(min_length=1)
    dialect: DialectName
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


def _raw_reference_problems(data: dict[str, Any]) -> list[str]:
    """The same checks on the raw file, so they are reported alongside other field problems
    (pydantic skips the model validator once any field is invalid)."""
    backends, routes = data.get("backends"), data.get("routes")
    if not isinstance(backends, dict) or not isinstance(routes, list):
        return []
    pairs = [(r.get("name"), r.get("backend")) if isinstance(r, dict) else (None, None) for r in routes]
    return reference_problems(backends, pairs)


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: Any, path: str, missing: list[str]) -> Any:
    """Replace `${VAR}` (or `${VAR:-default}`) in every string of the tree."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is None:
                missing.append(f"{path}: environment variable {name} is not set")
            return default or ""

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: expand_env(v, f"{path}.{k}" if path else str(k), missing) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, f"{path}.{i}", missing) for i, v in enumerate(value)]
    return value


def _format(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        # Cross-reference checks already carry their own key paths.
        if e["type"] == "value_error" and re.match(r"^routes\.\d+\.", msg):
            lines.extend(msg.split("; "))
        else:
            lines.append(f"{loc}: {msg}")
    return lines


def parse_config(data: Any) -> Config:
    if not isinstance(data, dict):
        raise ConfigError(["(top level): must be a mapping"])
    missing: list[str] = []
    data = expand_env(data, "", missing)
    if missing:
        raise ConfigError(missing)
    try:
        config = Config.model_validate(data)
    except ValidationError as e:
        lines = _format(e)
        raise ConfigError(lines + [p for p in _raw_reference_problems(data) if p not in lines]) from None
    problems = check_options(config) + path_collisions(config)
    if problems:
        raise ConfigError(problems)
    return config


def check_options(config: Config) -> list[str]:
    """Each backend's `options` against its dialect's options model; routes that would let
    clients reach endpoints the operator did not list."""
    problems = []
    for name, b in config.backends.items():
        try:
            registry.get(b.dialect).outbound.options_model.model_validate(b.options)
        except ValidationError as e:
            for err in e.errors():
                loc = ".".join(str(p) for p in err["loc"])
                problems.append(f"backends.{name}.options.{loc}: {err['msg']}")
    for i, r in enumerate(config.routes):
        b = config.backends[r.backend]
        if registry.get(b.dialect).outbound.shared_credentials and not b.model and not r.models:
            problems.append(
                f"routes.{i}.models: backend {r.backend!r} ({b.dialect}) has no `model:`, so clients would pick "
                "any endpoint its credentials reach; list the models this route may call, or set the backend's model"
            )
    return problems


def route_paths(config: Config) -> dict[str, list[tuple[str, str]]]:
    """Route name -> mounted (method, full path) pairs."""
    out: dict[str, list[tuple[str, str]]] = {}
    for r in config.routes:
        out[r.name] = [(m.method, r.prefix + m.path) for m in registry.get(r.dialect).inbound.mounts]
    return out


def path_collisions(config: Config) -> list[str]:
    """Routes of different dialects that would mount the same method and path.

    Routes of the same dialect and prefix share their paths on purpose (they are told apart by
    the requested model), so only cross-dialect clashes are errors.
    """
    owner: dict[tuple[str, str], tuple[int, str, str]] = {}
    problems: list[str] = []
    paths = route_paths(config)
    reported: set[tuple[int, int]] = set()
    for i, r in enumerate(config.routes):
        for mp in paths[r.name]:
            if mp in owner:
                j, other, other_dialect = owner[mp]
                if other_dialect != r.dialect and (j, i) not in reported:
                    reported.add((j, i))
                    problems.append(
                        f"routes.{i}.prefix: route {r.name!r} ({r.dialect}) and route {other!r} "
                        f"({other_dialect}) both mount {mp[0]} {mp[1]}; give one of them a prefix"
                    )
            else:
                owner[mp] = (i, r.name, r.dialect)
    return problems
