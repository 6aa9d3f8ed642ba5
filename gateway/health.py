"""Liveness and readiness: /healthz says the process runs; /readyz probes every backend.

Each backend replica is probed with its dialect's own health call under a short timeout, and
the outcome is cached briefly so that a busy probe loop does not hammer the backends.
"""

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from gateway import jsonutil
from gateway.core.engine import SessionRef
from gateway.core.routing import Backend

PROBE_TIMEOUT_S = 2.0
CACHE_S = 2.0


@dataclass(eq=False)
class Readiness:
    backends: list[Backend]
    session: SessionRef
    _checked: float = 0.0
    _state: dict[str, Any] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def _probe(self, b: Backend, url: str) -> dict[str, Any]:
        path = b.dialect.outbound.health_path(b)
        timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
        try:
            async with self.session.get().get(
                url + path, headers=b.headers, timeout=timeout, ssl=b.ssl_ctx if b.ssl_ctx is not None else True
            ) as resp:
                await resp.read()
                return {"url": url, "ready": resp.status < 400, "status": resp.status}
        except (TimeoutError, aiohttp.ClientError) as e:
            return {"url": url, "ready": False, "error": type(e).__name__}

    async def state(self) -> dict[str, Any]:
        async with self._lock:
            if time.monotonic() - self._checked < CACHE_S and self._state:
                return self._state
            out: dict[str, Any] = {}
            for b in self.backends:
                replicas = await asyncio.gather(*(self._probe(b, u) for u in b.urls))
                out[b.name] = {
                    "dialect": b.conf.dialect,
                    "ready": any(r["ready"] for r in replicas),
                    "replicas": list(replicas),
                }
            self._state = out
            self._checked = time.monotonic()
            return out


READINESS = web.AppKey("readiness", Readiness)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    backends = await request.app[READINESS].state()
    ready = all(b["ready"] for b in backends.values())
    body = {"status": "ready" if ready else "not_ready", "backends": backends}
    return web.Response(status=200 if ready else 503, body=jsonutil.dumps(body), content_type="application/json")
