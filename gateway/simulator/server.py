"""`create_sim_app(dialect)`: a simulated inference server speaking one dialect.

The dialect's inbound codec serves it, exactly as it serves gateway clients, with the fake model
as the engine behind it; so the simulator's wire format is the gateway's own rendering of that
dialect, held to the same fixtures.
"""

from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from gateway import dialects
from gateway.config import Backend as BackendConf
from gateway.config import Limits
from gateway.core.exchange import SERVICES, Services
from gateway.core.routing import Backend, Route, RouteGroup
from gateway.dialects.base import SIMULATED_SERVER
from gateway.metrics import Metrics
from gateway.simulator.engine import SimEngine

_MAX_BODY = 64 * 1024 * 1024


class SimOptionError(ValueError):
    """An option that does not describe a server of the dialect; the message is one line."""


def server_options(dialect: str, options: dict[str, Any] | None) -> BaseModel:
    """The options of the simulated server, checked against the dialect's backend options: a
    simulator imitates the kind of server a backend of that dialect talks to."""
    model = dialects.get(dialect).outbound.options_model
    try:
        return model.model_validate(options or {})
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "options"
        raise SimOptionError(f"invalid option for a {dialect} simulator: {where}: {err['msg']}") from None


def create_sim_app(
    dialect: str, model: str | None = None, token_delay_s: float = 0.0, options: dict[str, Any] | None = None
) -> web.Application:
    d = dialects.get(dialect)
    server = server_options(dialect, options)
    app = web.Application(client_max_size=_MAX_BODY)
    # The simulator records no metrics: with worker processes they would land in the gateway's.
    limits = Limits(max_body_bytes=_MAX_BODY, max_concurrent_requests=1 << 30, max_buffered_body_bytes=1 << 40)
    app[SERVICES] = Services.of(Metrics(enabled=False), limits)
    conf = BackendConf(dialect=dialect, simulate=True, model=model or "sim-model")
    app[SIMULATED_SERVER] = server
    backend = Backend("simulator", conf, d, server, [], {})
    route = Route("simulator", dialect, "", frozenset({model}) if model else None, backend, SimEngine(token_delay_s))
    d.inbound.mount(app.router, "", RouteGroup(dialect, "", [route]))

    async def health(request: web.Request) -> web.Response:
        return web.Response(status=200)

    if not any(r.resource is not None and r.resource.canonical == "/health" for r in app.router.routes()):
        app.router.add_get("/health", health)
    return app
