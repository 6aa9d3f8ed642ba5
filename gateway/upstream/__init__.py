"""The gateway's HTTP/1.1 client to its backends.

One `Pool` per backend holds its kept-alive connections to all its replicas, up to the backend's
`max_connections` in use at once. `Pool.request` sends a request and returns the `Answer` when its
head has come; the body is read whole within a bound (`Answer.read`) or piece by piece as it
arrives (`Answer.chunk`), and `release` gives the connection back, or `close` cuts it. Every
failure is a `Fault`, named for what the caller decides next: whether the request may have
reached the backend (docs/upstream.md). A `Target` is where a request goes: a backend URL (http,
https or a unix socket) and a path under it, directly or through an egress proxy (`Egress`).

It is the gateway's own because a proxy's whole work per request is small: aiohttp's client,
general-purpose (cookies, redirects, proxies, auth helpers, tracing hooks), cost about half the
CPU of a relayed request. Parsing answers, the part HTTP gets wrong when done by hand, is
httptools' (llhttp, as Node.js has it).
"""

from gateway.upstream.answer import YIELD_EVERY, Answer
from gateway.upstream.budget import AnswerBudget, OverBudget
from gateway.upstream.egress import DIRECT, Egress, check_proxy
from gateway.upstream.faults import (
    BadAnswer,
    Broken,
    ConnectFailed,
    ConnectTimeout,
    Fault,
    PoolBusy,
    ReadTimeout,
    Unsendable,
)
from gateway.upstream.head import Headers
from gateway.upstream.pool import DEFAULT_HEADERS, Pool
from gateway.upstream.target import Target, check_url, shown_url

__all__ = [
    "DEFAULT_HEADERS",
    "DIRECT",
    "YIELD_EVERY",
    "Answer",
    "AnswerBudget",
    "BadAnswer",
    "Broken",
    "ConnectFailed",
    "ConnectTimeout",
    "Egress",
    "Fault",
    "Headers",
    "OverBudget",
    "Pool",
    "PoolBusy",
    "ReadTimeout",
    "Target",
    "Unsendable",
    "check_proxy",
    "check_url",
    "shown_url",
]
