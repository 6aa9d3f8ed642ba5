"""/healthz and /readyz: per-backend probes with each dialect's own health call, cached."""

import asyncio

from aiohttp import web

from gateway.dialects import registry as dialects
from gateway.health import READINESS
from tests.support import Recorded, json_reply

# The health call each dialect's backends answer (docs/operations.md, Health and readiness); for
# Triton the model's own readiness is as good as the server's, and says more.
HEALTH_PATHS = {
    "openai": {"/v1/models"},
    "mindie": {"/health"},
    "tgi": {"/health"},
    "triton": {"/v2/health/ready", "/v2/models/m/ready"},
}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def two_backends(up_url: str, down_url: str) -> dict:
    return {
        "backends": {
            "good": {"dialect": "openai", "url": up_url, "headers": {"Authorization": "Bearer b-token"}},
            "gone": {"dialect": "openai", "url": down_url},
        },
        "routes": [
            {"name": "a", "dialect": "openai", "backend": "good", "models": ["x"]},
            {"name": "b", "dialect": "openai", "backend": "gone", "models": ["y"]},
        ],
    }


async def test_healthz(make_gateway, upstream):
    gw = await make_gateway(two_backends(upstream.url, upstream.url))
    r = await gw.get("/healthz")
    assert r.status == 200
    assert await r.json() == {"status": "ok"}
    assert upstream.requests == []  # liveness never touches a backend


async def test_readyz_ready_when_every_backend_answers(make_gateway, upstream):
    upstream.reply = json_reply({"object": "list", "data": []})
    gw = await make_gateway(two_backends(upstream.url, upstream.url + "/prefix"))
    r = await gw.get("/readyz")
    assert r.status == 200
    body = await r.json()
    assert body["status"] == "ready"
    assert body["backends"]["good"] == {
        "dialect": "openai",
        "ready": True,
        "replicas": [
            {"replica": 0, "path": "/v1/models", "ready": True, "status": 200, "ejected": False, "failures_in_a_row": 0}
        ],
    }
    assert sorted(rec.path for rec in upstream.requests) == ["/prefix/v1/models", "/v1/models"]
    # Probes carry the backend's own credentials, like any call to it.
    good = next(rec for rec in upstream.requests if rec.path == "/v1/models")
    assert good.headers["Authorization"] == "Bearer b-token"


async def test_readyz_names_the_backend_that_is_down(make_gateway, upstream, unused_tcp_port):
    upstream.reply = json_reply({"object": "list", "data": []})
    gw = await make_gateway(two_backends(upstream.url, f"http://127.0.0.1:{unused_tcp_port}"))
    r = await gw.get("/readyz")
    assert r.status == 503
    body = await r.json()
    assert body["status"] == "not_ready"
    assert body["not_ready"] == ["gone"]
    assert body["backends"]["good"]["ready"] is True
    gone = body["backends"]["gone"]
    assert gone["ready"] is False
    assert gone["replicas"] == [
        {
            "replica": 0,
            "path": "/v1/models",
            "ready": False,
            "error": "ConnectFailed",
            # One failed probe counts as one failure; three in a row take the replica out.
            "ejected": False,
            "failures_in_a_row": 1,
        }
    ]


async def test_readyz_backend_answering_an_error_status_is_not_ready(make_gateway, upstream):
    upstream.reply = json_reply({"error": "loading"}, status=503)
    gw = await make_gateway(two_backends(upstream.url, upstream.url))
    r = await gw.get("/readyz")
    assert r.status == 503
    body = await r.json()
    assert body["not_ready"] == ["good", "gone"]
    assert body["backends"]["good"]["replicas"][0]["status"] == 503


async def test_one_live_replica_is_enough(make_gateway, upstream, unused_tcp_port):
    upstream.reply = json_reply({"object": "list", "data": []})
    conf = {
        "backends": {"pool": {"dialect": "openai", "urls": [f"http://127.0.0.1:{unused_tcp_port}", upstream.url]}},
        "routes": [{"name": "a", "dialect": "openai", "backend": "pool"}],
    }
    gw = await make_gateway(conf)
    r = await gw.get("/readyz")
    assert r.status == 200
    replicas = (await r.json())["backends"]["pool"]["replicas"]
    assert [x["ready"] for x in replicas] == [False, True]


async def test_readyz_caches_the_probe_round(make_gateway, upstream, unused_tcp_port):
    upstream.reply = json_reply({"object": "list", "data": []})
    gw = await make_gateway(two_backends(upstream.url, f"http://127.0.0.1:{unused_tcp_port}"))
    readiness = gw.server.app[READINESS]
    clock = FakeClock()
    readiness.clock = clock
    first = await (await gw.get("/readyz")).json()
    assert first["cached"] is False
    assert len(upstream.requests) == 1
    # Within the cache window: no new probe, same answer, even for concurrent callers.
    clock.now += readiness.cache_s / 2
    answers = await asyncio.gather(*(gw.get("/readyz") for _ in range(5)))
    assert {a.status for a in answers} == {503}
    assert [(await a.json())["cached"] for a in answers] == [True] * 5
    assert len(upstream.requests) == 1
    # Past it: probed again, and a backend that recovered shows up.
    clock.now += readiness.cache_s
    r = await gw.get("/readyz")
    assert (await r.json())["cached"] is False
    assert len(upstream.requests) == 2


async def test_probe_times_out(make_gateway, upstream):
    async def slow(request: web.Request, rec: Recorded) -> web.StreamResponse:
        await asyncio.sleep(30)
        return web.Response()

    upstream.reply = slow
    conf = two_backends(upstream.url, upstream.url)
    gw = await make_gateway(conf)
    gw.server.app[READINESS].timeout_s = 0.2
    r = await gw.get("/readyz")
    assert r.status == 503
    body = await r.json()
    assert body["backends"]["good"]["replicas"][0]["error"] == "timeout after 0.2s"


async def test_each_dialect_is_probed_with_its_own_health_call(make_gateway, upstream):
    upstream.reply = json_reply({})
    names = [d for d in HEALTH_PATHS if d in dialects.available()]
    assert "openai" in names
    conf: dict = {"backends": {}, "routes": []}
    for d in names:
        conf["backends"][d] = {"dialect": d, "url": f"{upstream.url}/{d}", "model": "m"}
        conf["routes"].append({"name": d, "dialect": "openai", "backend": d, "models": [d]})
    gw = await make_gateway(conf)
    r = await gw.get("/readyz")
    body = await r.json()
    assert set(body["backends"]) == set(names)
    got = {rec.path.split("/", 2)[1]: "/" + rec.path.split("/", 2)[2] for rec in upstream.requests}
    assert set(got) == set(names)
    for d in names:
        assert got[d] in HEALTH_PATHS[d], d
        assert body["backends"][d]["replicas"][0]["path"] == got[d]


async def test_replica_addresses_and_credentials_are_not_shown(make_gateway, upstream):
    upstream.reply = json_reply({"object": "list", "data": []})
    host = upstream.url.removeprefix("http://")
    conf = {
        "backends": {"b": {"dialect": "openai", "url": f"http://user:pa55word@{host}"}},
        "routes": [{"name": "a", "dialect": "openai", "backend": "b"}],
    }
    gw = await make_gateway(conf)
    text = await (await gw.get("/readyz")).text()
    assert "pa55word" not in text
    # /readyz is public: replicas are named by their position in `urls:`, not by address.
    assert host not in text
    assert '"replica":0' in text
