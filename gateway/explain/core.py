"""`explain`: what the gateway would do with one client request, worked out without sending it.

Every step is the gateway's own: the route's inbound dialect parses the body, the route group
picks the route as the exchange handler does, the engine makes the plan (gateway.proxy.plan) and
builds each upstream call and its headers (ProxyEngine.call, ProxyEngine.headers), and the
request's head is written by the backend client's own writer. Nothing is dialled: backends are
built as the app builds them, but no connection pool is ever opened.
"""

import contextlib
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from gateway import jsonutil
from gateway.adapters.prompt import prompt_text
from gateway.codec.capabilities import key_headers
from gateway.codec.contract import Caller, Endpoint, Inbound, StateStore, UpstreamCall
from gateway.config import Config
from gateway.config import Route as RouteConf
from gateway.dialects import registry
from gateway.explain.record import ClientError, Explanation, Fanout, ParamFate, Upstream
from gateway.neutral.errors import GatewayError, Unsupported
from gateway.neutral.params import Fate
from gateway.neutral.types import Request, Task
from gateway.proxy.engine import ProxyEngine
from gateway.proxy.plan import Plan, fate_of, policy, pool_headers
from gateway.proxy.routing import Backend, Route, RouteGroup, build_backend
from gateway.proxy.state import MemoryStore, StoreLimits
from gateway.redact import REDACTED
from gateway.upstream import AnswerBudget, Unsendable, shown_url
from gateway.upstream.pool import _request_bytes
from gateway.upstream.target import join

# The request id an explanation shows when the client's headers give none (the gateway makes
# a fresh one for each request).
REQUEST_ID = "explain"
# Headers whose values are credentials whoever set them: the URL's user:password, a proxy's.
_CREDENTIALS = frozenset({"authorization", "proxy-authorization"})
# What the gateway does for a parameter it emulates, by neutral name.
_EMULATED = {
    "stop": "the gateway cuts the text at the stop strings",
    "include_stop_str_in_output": "the gateway keeps or cuts the stop text itself",
    "n": "the gateway asks for each choice in an upstream request of its own",
    "encoding_format": "the gateway encodes the vectors itself",
}
_WHY = {
    Fate.DROP: "the backend's dialect has no such field; a sampling hint, so the request goes on "
    "without it and the answer names it in X-Gateway-Dropped-Params",
    Fate.REFUSE: "the backend's dialect has no such field, and the answer depends on it: the request is refused",
}


_WOULD = {Fate.DROP: "dropped", Fate.REFUSE: "refused"}


class ExplainError(Exception):
    """The request cannot be explained as asked (an unknown route or path): a usage error."""


async def explain(
    config: Config,
    route_name: str,
    path: str | None,
    body: bytes,
    headers: Mapping[str, str] | None = None,
    store: StateStore | None = None,
) -> Explanation:
    """What the gateway would do with `body` sent to `path` (a path the route mounts, as the
    client calls it; None: the route's chat path, or its only one) of the route `route_name`,
    with the client's `headers` (those that reach a backend, and X-Request-Id). `store`: what a
    stateful API kept from earlier requests (none: an empty one). ExplainError for an unknown
    route or path; anything the client's request gets wrong is the explanation's `error`."""
    conf = _route_conf(config, route_name)
    inbound = registry.get(conf.dialect).inbound
    assert inbound is not None, "the config lets a route take only a dialect with its inbound half"
    ep, shown_path, values = _endpoint(inbound, conf.prefix, path)
    engines = _engines(config, conf)
    group = RouteGroup(conf.dialect, conf.prefix, [r for r, _ in engines.values()])
    client = CIMultiDictProxy(CIMultiDict(headers or {}))
    request_id = client.get("X-Request-Id") or REQUEST_ID
    notes: list[str] = []
    route, engine = engines[conf.name]
    req: Request | None = None
    plan: Plan | None = None
    fates: Mapping[str, Fate] | None = None
    calls: list[UpstreamCall] = []
    error: ClientError | None = None
    try:
        req = ep.parse(body, values)
        if ep.prepare is not None:
            if store is None:
                notes.append("what the API keeps from earlier requests is read from an empty store")
                store = MemoryStore(StoreLimits(16, 1 << 20))
            req = await ep.prepare(req, Caller(request_id, "", store))
        chosen = group.route(ep.path_model(values) if ep.path_model else req.model)
        if chosen.name != route.name:
            notes.append(f"the request's model is served by route {chosen.name!r}: explained for it")
            route, engine = engines[chosen.name]
        try:
            plan = engine.plan(req, request_id, len(body), config.limits.max_fanout, pool_headers(client))
        except Unsupported:
            with contextlib.suppress(GatewayError):  # the carriage itself refused: no fates to show
                fates = policy(engine.codec.carriage(req, route.backend.view).fates, req.params)[0]
            raise
        fates = plan.fates
        calls = [engine.call(plan, part) for part in plan.parts]
    except GatewayError as e:
        reply = inbound.error_reply(e)
        error = ClientError(reply.status, reply.content_type, reply.body or b"")
    backend = route.backend
    notes += _notes(backend, client, inbound, plan, config)
    upstream = []
    for call in calls:
        try:
            upstream.append(_upstream(engine, backend, call, request_id))
        except Unsendable as e:
            notes.append(f"the request cannot be sent: {e}")
    return Explanation(
        route=route.name,
        dialect=conf.dialect,
        path=shown_path,
        backend=backend.name,
        backend_dialect=backend.conf.dialect,
        model=backend.model,
        simulated=backend.conf.simulate,
        request_id=request_id,
        passthrough=plan is not None and plan.passthrough,
        params=_params(req, plan, fates, engine, calls),
        stops=plan.stops if plan is not None else None,
        include_stop=plan is not None and plan.include_stop,
        fanout=_fanout(req, plan),
        prompt=_prompt(req, plan, backend, calls),
        upstream=tuple(upstream),
        dropped=",".join(plan.dropped) if plan is not None else "",
        error=error,
        notes=tuple(notes),
    )


def _route_conf(config: Config, name: str) -> RouteConf:
    for r in config.routes:
        if r.name == name:
            return r
    raise ExplainError(f"no route {name!r}; the routes are: {', '.join(r.name for r in config.routes)}")


def _endpoint(inbound: Inbound, prefix: str, path: str | None) -> tuple[Endpoint, str, dict[str, str]]:
    """The inference endpoint mounted at `path`, the path as shown, and the values the router
    reads from it; by default the chat path, or the only one."""
    router = web.UrlDispatcher()  # the router's own path patterns, without a server
    mounted = [(prefix + m.path, m.endpoint) for m in inbound.mounts if m.endpoint is not None]
    if prefix:
        # The prefix itself is its root's path too (gateway.proxy.mounting).
        mounted += [(prefix, m.endpoint) for m in inbound.mounts if m.endpoint is not None and m.path == "/"]
    if path is None:
        chat = [(p, ep) for p, ep in mounted if p.endswith("/chat/completions")]
        if len(mounted) == 1 or len(chat) == 1:
            p, ep = (mounted if len(mounted) == 1 else chat)[0]
            return ep, p, {}
        raise ExplainError(f"say which path the request is for (--path): {', '.join(p for p, _ in mounted)}")
    for template, ep in mounted:
        info = router.add_resource(template).get_info()
        if "path" in info and info["path"] == path:
            return ep, path, {}
        found = info["pattern"].fullmatch(path) if "pattern" in info else None
        if found is not None:
            return ep, path, {k: v for k, v in found.groupdict().items()}
    raise ExplainError(f"the route mounts no inference path {path!r}; its paths: {', '.join(p for p, _ in mounted)}")


def _engines(config: Config, conf: RouteConf) -> dict[str, tuple[Route, ProxyEngine]]:
    """The routes that share `conf`'s dialect and prefix (told apart by the requested model),
    each with its engine, in the config's order, as the app builds them."""
    backends: dict[str, Backend] = {}
    out: dict[str, tuple[Route, ProxyEngine]] = {}
    for r in config.routes:
        if (r.dialect, r.prefix) != (conf.dialect, conf.prefix):
            continue
        if r.backend not in backends:
            b = config.backends[r.backend]
            backends[r.backend] = build_backend(r.backend, b, registry.get(b.dialect))
        # Nothing is sent, so no answer takes room: a budget of its own, never used.
        engine = ProxyEngine(backends[r.backend], config.limits.max_answer_bytes, AnswerBudget(1))
        models = frozenset(r.models) if r.models else None
        out[r.name] = (Route(r.name, r.dialect, r.prefix, models, backends[r.backend], engine), engine)
    return out


def _upstream(engine: ProxyEngine, backend: Backend, call: UpstreamCall, request_id: str) -> Upstream:
    """The call as it goes on the wire to the backend's first replica: its request line and
    header lines as the client writes them, credentials hidden."""
    simulated = backend.conf.simulate
    # A simulated backend listens on a loopback port chosen when the app starts.
    base = "http://127.0.0.1" if simulated else backend.urls[0]
    target = backend.target(base, call.path)
    head = _request_bytes(call.method, target, engine.headers(call, request_id), call.body)
    lines = head.split(b"\r\n\r\n", 1)[0].decode("utf-8", "replace").split("\r\n")
    secret = {k.lower() for k in backend.conf.headers} | _CREDENTIALS
    shown: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, _, value = line.partition(": ")
        if simulated and name.lower() == "host":
            continue
        shown.append((name, REDACTED if name.lower() in secret else value))
    return Upstream(
        method=call.method,
        url=None if simulated else shown_url(join(base, call.path)),
        target=shown_url(lines[0].split(" ")[1]),  # the base URL's query may hold a token
        headers=tuple(shown),
        body=call.body,
        stream=call.stream,
        proxy=target.proxy.shown if target.proxy is not None else None,
    )


def _params(
    req: Request | None,
    plan: Plan | None,
    fates: Mapping[str, Fate] | None,
    engine: ProxyEngine,
    calls: list[UpstreamCall],
) -> tuple[ParamFate, ...]:
    if req is None:
        return ()
    out = []
    for name, value in req.params.items():
        if fates is None:
            continue
        shown = _plain(value)
        fate = fate_of(name, value, fates)
        if plan is not None and plan.passthrough:
            if name in plan.dropped:
                why = _WHY[Fate.DROP] + ": its field is taken out of the body forwarded"
                out.append(ParamFate(name, shown, Fate.DROP.value, (), why))
                continue
            why = "the body goes to the backend as the client sent it"
            if fate in (Fate.DROP, Fate.REFUSE):
                # A dialect whose forwarded bodies the gateway does not trim: where the policy
                # would have stepped in is what surprises a client whose backend then refuses it.
                why += (
                    ", though the backend's dialect has no such field: the backend judges it "
                    f"(translated, it would be {_WOULD[fate]})"
                )
            out.append(ParamFate(name, shown, "forward", (), why))
            continue
        if fate is None:
            out.append(ParamFate(name, shown, "off", (), "set to its off value, it asks for nothing: left out"))
            continue
        wire: tuple[str, ...] = ()
        if plan is not None and calls and fate in (Fate.MAP, Fate.EMULATE):
            wire = _carriers(engine, plan, name, calls[0])
        if fate is Fate.MAP:
            why = f"sent as {', '.join(wire)}" if wire else "the backend takes it"
        elif fate is Fate.EMULATE:
            why = _EMULATED.get(name, "the gateway provides it")
            if wire:
                why += f" (and sends it as {', '.join(wire)})"
        else:
            why = _WHY[fate]
        out.append(ParamFate(name, shown, fate.value, wire, why))
    return tuple(out)


def _carriers(engine: ProxyEngine, plan: Plan, name: str, call: UpstreamCall) -> tuple[str, ...]:
    """The fields of the first upstream body that carry parameter `name`: those that change
    when the same call is built without it."""
    part = plan.parts[0]
    if getattr(part.params, name) is None or call.body is None:
        return ()
    try:
        other = engine.call(plan, part.but(params=part.params.replace(**{name: None})))
        full, without = _leaves(jsonutil.loads(call.body)), _leaves(jsonutil.loads(other.body or b"{}"))
    except (GatewayError, jsonutil.JSONDecodeError):
        return ()
    return tuple(k for k, v in full.items() if k not in without or without[k] != v)


def _leaves(value: Any, at: str = "") -> dict[str, Any]:
    """A JSON document's values by dotted path (lists are values)."""
    if not isinstance(value, dict):
        return {at: value}
    out: dict[str, Any] = {}
    for k, v in value.items():
        out.update(_leaves(v, f"{at}.{k}" if at else str(k)))
    return out


def _plain(value: Any) -> Any:
    """A parameter's value as JSON writes it."""
    return jsonutil.loads(jsonutil.dumps(value))


def _fanout(req: Request | None, plan: Plan | None) -> Fanout:
    if req is None or plan is None:
        return Fanout(0, 0, 0, "")
    n = req.params.choices
    split = not plan.passthrough and plan.per_part == 1 and n > 1
    prompts = plan.width // (n if split else 1)
    why = []
    if prompts > 1:
        why.append(f"{prompts} prompts: the backend takes one prompt per request")
    if split:
        why.append(f"n={n}: the backend gives one choice per request")
    return Fanout(plan.width, prompts, n if split else 1, "; ".join(why))


def _prompt(req: Request | None, plan: Plan | None, backend: Backend, calls: list[UpstreamCall]) -> str | None:
    """The chat template's rendering of the messages, when the upstream body carries it (a
    backend that takes text, with the model's `tokenizer:` folder)."""
    if req is None or plan is None or plan.passthrough or not calls or req.task is not Task.CHAT:
        return None
    if not backend.view.tokenizer or calls[0].body is None:
        return None
    try:
        text = prompt_text(plan.parts[0], backend.view)
    except GatewayError:
        return None
    return text if jsonutil.dumps(text) in calls[0].body else None


def _notes(
    backend: Backend, client: Mapping[str, str], inbound: Inbound, plan: Plan | None, config: Config
) -> list[str]:
    notes = []
    if plan is not None and plan.passthrough:
        notes.append(
            "pass-through: the backend speaks the client's wire, so the client's body goes as it is "
            "(but for the model's name, where the backend's differs) and the answer comes back as it came"
        )
    elif plan is not None and plan.same_wire:
        notes.append("the backend speaks the client's wire, and its codec builds the body anew")
    given = [h.header for h in key_headers(inbound) if h.header in client]
    if given:
        notes.append(f"the client's {', '.join(given)} is not forwarded: each side has its own credentials")
    if backend.conf.simulate:
        notes.append(f"the backend is an in-process simulated {backend.conf.dialect} server")
    elif len(backend.urls) > 1:
        notes.append(
            f"shown for the first of its {len(backend.urls)} replicas; a request goes to one of them "
            "(the next one is tried while no connection was made)"
        )
    if config.tracing is not None:
        notes.append("with tracing on, each request also carries the trace's context (traceparent)")
    return notes
