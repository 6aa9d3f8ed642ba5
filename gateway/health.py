"""Liveness and readiness: /healthz says the process runs; /readyz probes every backend.

Each backend replica is probed with its dialect's own health call (the outbound codec's
`health_path`: MindIE /health, Triton /v2/health/ready, TGI /health, OpenAI /v1/models) under a
short timeout, all backends at once. The outcome is cached briefly so that a busy probe loop
(several kubelets, a load balancer) does not hammer the backends; concurrent callers share one
probe round. A backend is ready when at least one of its replicas is.

Once the process is stopping (draining), /readyz says so at once, whatever the backends say, so
that load balancers stop sending it traffic while it still serves what they send meanwhile.
"""

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway import jsonutil
from gateway.codec.capabilities import HealthDocument
from gateway.proxy.bodies import MAX_INFO_BODY
from gateway.proxy.routing import Backend
from gateway.upstream import Fault, ReadTimeout

PROBE_TIMEOUT_S = 2.0
CACHE_S = 2.0


@dataclass(eq=False)
class Readiness:
    backends: list[Backend]
    timeout_s: float = PROBE_TIMEOUT_S
    cache_s: float = CACHE_S
    clock: Callable[[], float] = time.monotonic
    # Set when the process starts draining: /readyz answers 503 from then on.
    draining: bool = False
    _checked: float | None = None
    _state: dict[str, Any] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def _probe(self, b: Backend, replica: int) -> dict[str, Any]:
        # Replicas are named by their position in `urls:`: the endpoint is public, and the
        # addresses behind the gateway are not for anyone who can reach it.
        url = b.urls[replica]
        outbound = b.outbound
        path = outbound.health_path(b.view)
        try:
            got = await b.get(url, path, limit=MAX_INFO_BODY, within=self.timeout_s)
        except ReadTimeout:
            return {"replica": replica, "path": path, "ready": False, "error": f"timeout after {self.timeout_s:g}s"}
        except Fault as e:
            return {"replica": replica, "path": path, "ready": False, "error": type(e).__name__}
        ready = 200 <= got.status < 300
        # A dialect whose health answer is a state document (Databricks) reads it itself.
        if ready and isinstance(outbound, HealthDocument):
            ready = got.body is not None and outbound.health_ok(got.body)
        return {"replica": replica, "path": path, "ready": ready, "status": got.status}

    async def _backend(self, b: Backend) -> dict[str, Any]:
        replicas = await asyncio.gather(*(self._probe(b, i) for i in range(len(b.urls))))
        for r in replicas:
            # A probe tells as much about a replica as a request does: it feeds ejection, and
            # the answer shows whether the replica is taking requests.
            b.health.probed(r["replica"], r["ready"])
            r.update(b.health.report(r["replica"]))
        return {"dialect": b.conf.dialect, "ready": any(r["ready"] for r in replicas), "replicas": list(replicas)}

    async def state(self) -> tuple[dict[str, Any], bool]:
        """Per-backend state, and whether it came from the cache."""
        async with self._lock:
            now = self.clock()
            if self._checked is not None and now - self._checked < self.cache_s:
                return self._state, True
            states = await asyncio.gather(*(self._backend(b) for b in self.backends))
            self._state = {b.name: s for b, s in zip(self.backends, states, strict=True)}
            self._checked = self.clock()
            return self._state, False

    async def all_ready(self, names: Sequence[str]) -> bool:
        """Whether each backend named has a ready replica."""
        state, _cached = await self.state()
        return all(state.get(n, {}).get("ready", False) for n in names)


READINESS = web.AppKey("readiness", Readiness)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    readiness = request.app[READINESS]
    if readiness.draining:
        return web.Response(status=503, body=jsonutil.dumps({"status": "draining"}), content_type="application/json")
    backends, cached = await readiness.state()
    down = [name for name, b in backends.items() if not b["ready"]]
    body: dict[str, Any] = {"status": "not_ready" if down else "ready", "cached": cached, "backends": backends}
    if down:
        body["not_ready"] = down
    return web.Response(status=503 if down else 200, body=jsonutil.dumps(body), content_type="application/json")
