"""What every request handler needs of the app, made whole when the app is made (its parts that
change while it serves, a drain's, are in `Drain`); stored on the app under SERVICES."""

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.codec.contract import StateStore
from gateway.config import Limits
from gateway.metrics import Metrics
from gateway.proxy.admission import Budget
from gateway.proxy.peers import Network, key_id
from gateway.proxy.state import MemoryStore, StoreLimits
from gateway.records import record

if TYPE_CHECKING:  # imported only when tracing is on (gateway.app)
    from gateway.tracing import Tracing


@dataclass(eq=False, slots=True)
class Drain:
    """A stopping gateway's state, which the listener and the handlers share."""

    # Streams being written, so that a shutdown past its grace period can end each one the
    # dialect's way (an in-band error and the terminator) instead of cutting its socket.
    streams: set["asyncio.Task[object]"] = field(default_factory=set)
    ending: bool = False
    # The gateway is draining: answers say `Connection: close` (a stream's, before it starts).
    closing: bool = False

    def end_streams(self) -> int:
        """End every stream still being written; how many there were."""
        self.ending = True
        for task in list(self.streams):
            task.cancel()
        return len(self.streams)


@record(kw_only=True)
class Services:
    metrics: Metrics
    # API key -> the name the access log gives it; None when auth is off.
    api_keys: Mapping[str, str] | None
    limits: Limits
    budget: Budget
    trusted_proxies: Sequence[Network]
    # InferenceObjective name -> its priority (config: inference_objectives).
    objectives: Mapping[str, int]
    # What stateful inbound APIs keep (the Responses API's stored responses).
    store: StateStore
    tracing: "Tracing | None"  # None: tracing is off
    access_log: bool  # off for the gateway's in-process simulated backends
    drain: Drain

    @classmethod
    def of(
        cls,
        metrics: Metrics,
        limits: Limits,
        api_keys: Iterable[str] | None = None,
        *,
        trusted_proxies: Sequence[Network] = (),
        objectives: Mapping[str, int] | None = None,
        store: StateStore | None = None,
        tracing: "Tracing | None" = None,
        access_log: bool = True,
    ) -> "Services":
        return cls(
            metrics=metrics,
            api_keys=None if api_keys is None else {k: key_id(k) for k in api_keys},
            limits=limits,
            budget=Budget(
                limits.max_concurrent_requests, limits.max_buffered_body_bytes, limits.max_unfinished_bodies_per_client
            ),
            trusted_proxies=tuple(trusted_proxies),
            objectives=dict(objectives or {}),
            store=store if store is not None else MemoryStore(StoreLimits(10_000, 256 * 1024 * 1024)),
            tracing=tracing,
            access_log=access_log,
            drain=Drain(),
        )


SERVICES = web.AppKey("services", Services)
