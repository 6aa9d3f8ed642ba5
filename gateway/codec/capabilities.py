"""Capabilities a dialect's half may have besides what its contract asks (gateway.codec.contract),
each a small protocol the proxy discovers by type (`has`): nothing outside a dialect asks for its
name."""

from collections.abc import Sequence
from typing import Any, Protocol, TypeGuard, TypeVar, runtime_checkable

from gateway.codec.contract import BackendView, Caller, Inbound
from gateway.modelserver import PageKind
from gateway.neutral.types import Request
from gateway.records import record

C = TypeVar("C")

# Whether a class has a capability, found once per class: checking a runtime protocol walks its
# members each time, which costs more than a pass-through read. A capability is a class's, never
# an instance's own attribute.
_FOUND: dict[tuple[type, type], bool] = {}


def has(obj: object, capability: type[C]) -> TypeGuard[C]:
    """Whether `obj` has `capability` (one of the protocols below, or the contract's `Imitates`)."""
    key = (type(obj), capability)
    found = _FOUND.get(key)
    if found is None:
        found = _FOUND[key] = isinstance(obj, capability)
    return found


# ---- an outbound's ---------------------------------------------------------------------------


@runtime_checkable
class HealthDocument(Protocol):
    """Its health call answers 200 either way and says "ready" in the body."""

    def health_ok(self, body: bytes) -> bool: ...


@runtime_checkable
class ListsModels(Protocol):
    """Its servers list their models OpenAI's way (`{"data": [{"id": ...}]}`) at a path of
    their own, which an OpenAI client's model list may relay."""

    def models_path(self, backend: BackendView[Any]) -> str: ...


@runtime_checkable
class TrimsForwarded(Protocol):
    """It forwards a client of its own wire the body as it came, and can take out the fields of
    parameters its servers lack (the fate policy drops a hint, or refuses a contract, for a
    forwarded body as for a translated one)."""

    def trims(self, req: Request) -> bool:
        """Whether it knows the fields of this request's wire (else its body goes as it came)."""
        ...

    def trimmed(self, req: Request, names: Sequence[str]) -> dict[str, Any]:
        """The client's body (`req.raw`) without the fields of these neutral parameters."""
        ...


@record
class KvSource:
    """Where a backend's servers say how full their KV cache is: which family of metrics page
    (gateway.modelserver's readers), and where the page is when the config does not say."""

    page: PageKind
    # Where the page is: (a URL, the path under it), each joined as requests' paths are.
    urls: Sequence[tuple[str, str]]


@runtime_checkable
class KvCacheSource(Protocol):
    """Its servers give a KV-cache figure on a Prometheus page (pool-member mode)."""

    def kv_source(self, backend: BackendView[Any], urls: Sequence[str]) -> KvSource | None:
        """The page family and its default address for these replica URLs; None when this
        backend's servers give no such figure."""
        ...


# ---- a stream renderer's ---------------------------------------------------------------------


@runtime_checkable
class Pings(Protocol):
    """A stream whose clients give up on silence (Anthropic's): while the backend says nothing
    for `ping_every_s`, the renderer's `ping` goes out (the stream's head too, if the first
    events are that late; an error after that comes in-band)."""

    ping_every_s: float

    def ping(self) -> bytes: ...


@runtime_checkable
class Keeps(Protocol):
    """A stream of an API that keeps state: once it ended whole, what it rendered is kept."""

    async def keep(self, caller: Caller) -> None: ...


# ---- an event stream's -------------------------------------------------------------------------


@runtime_checkable
class Ends(Protocol):
    """A stream that knows when its backend's answer has all come (`ended`): from then on `next`
    gives what is left, and then None, without waiting on the backend. So the last events go to
    the client together with the stream's end, in one write instead of two or three (each write
    to a socket costs the machine about as much as reading the events in it)."""

    @property
    def ended(self) -> bool: ...


def at_end(stream: object) -> bool:
    """Whether `stream` is an `Ends` whose answer has all come."""
    return has(stream, Ends) and stream.ended


# ---- an inbound's ----------------------------------------------------------------------------


@record
class KeyHeader:
    """Where a client puts its API key: a header, and the scheme word before the key in it
    ("Bearer"), or "" for a header that holds the key alone (`x-api-key`)."""

    header: str
    scheme: str = ""


BEARER = KeyHeader("Authorization", "Bearer")


@runtime_checkable
class OwnKeyHeaders(Protocol):
    """An inbound whose clients may send their key elsewhere than `Authorization: Bearer`."""

    key_headers: Sequence[KeyHeader]


def key_headers(inbound: Inbound) -> Sequence[KeyHeader]:
    """Where clients of `inbound` may put their API key, in the order they are looked at."""
    return inbound.key_headers if has(inbound, OwnKeyHeaders) else (BEARER,)
