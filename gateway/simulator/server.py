"""`create_sim_app(dialect)`: a simulated inference server speaking one dialect.

The dialect's inbound codec serves it, as it serves gateway clients, with the fake model as the
engine behind it; a dialect whose servers differ in ways its inbound does not show (Triton's
backend families) says what serves instead, imitating the server its options name.

A simulator is a smoke-test partner: the proof of a dialect is the real server and its clients.
"""

from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from gateway.config import Backend as BackendConf
from gateway.config import Limits
from gateway.dialects import registry
from gateway.metrics import Metrics
from gateway.proxy.mounting import mount
from gateway.proxy.routing import Route, RouteGroup, build_backend
from gateway.proxy.services import SERVICES, Services
from gateway.simulator.engine import SimEngine

_MAX_BODY = 64 * 1024 * 1024


class SimOptionError(ValueError):
    """An option that does not describe a server of the dialect; the message is one line."""


def server_options(dialect: str, options: dict[str, Any] | None) -> BaseModel:
    """The options of the simulated server, checked against the dialect's backend options: a
    simulator imitates the kind of server a backend of that dialect talks to."""
    outbound = registry.get(dialect).outbound
    if outbound is None:
        raise SimOptionError(f"there are no {dialect} servers to simulate: the dialect is spoken only by clients")
    model = outbound.options_model
    try:
        options_model: type[BaseModel] = model
        return options_model.model_validate(options or {})
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "options"
        raise SimOptionError(f"invalid option for a {dialect} simulator: {where}: {err['msg']}") from None


def create_sim_app(
    dialect: str,
    model: str | None = None,
    token_delay_s: float = 0.0,
    options: dict[str, Any] | None = None,
    access_log: bool = True,
    tool_parser: str | None = None,
) -> web.Application:
    """A simulated server of `dialect`; `tool_parser`: the format its model writes tool calls in,
    where its prompt shows tools (a server that carries only text)."""
    d = registry.get(dialect)
    server = server_options(dialect, options)
    app = web.Application(client_max_size=_MAX_BODY)
    # Its one client is a gateway, which may be sending any number of bodies at once.
    limits = Limits(
        max_body_bytes=_MAX_BODY,
        max_concurrent_requests=1 << 30,
        max_buffered_body_bytes=1 << 40,
        max_unfinished_bodies_per_client=1 << 30,
    )
    # The simulator records no metrics: with worker processes they would land in the gateway's.
    app[SERVICES] = Services.of(Metrics(enabled=False), limits, access_log=access_log)
    conf = BackendConf(dialect=dialect, simulate=True, model=model or "sim-model", options=options or {})
    backend = build_backend("simulator", conf, d)
    route = Route(
        "simulator", dialect, "", frozenset({model}) if model else None, backend, SimEngine(token_delay_s, tool_parser)
    )
    inbound = d.server(server)
    if inbound is None:
        raise SimOptionError(f"a {dialect} server cannot be simulated: the dialect says nothing of what it serves")
    mount(app.router, "", RouteGroup(dialect, "", [route]), inbound)

    async def health(request: web.Request) -> web.Response:
        return web.Response(status=200)

    if not any(r.resource is not None and r.resource.canonical == "/health" for r in app.router.routes()):
        app.router.add_get("/health", health)
    return app
