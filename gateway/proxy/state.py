"""What stateful inbound APIs keep between requests (codec.contract.StateStore), in this process.

Entries are bounded by number and by bytes, all owners together; past either bound the oldest
entries are let go first. A store shared by worker processes or replicas is Redis's
(gateway.proxy.redisstate), chosen by the config's `responses_store.redis_url`.
"""

from typing import Protocol, runtime_checkable

from gateway import config as cfg
from gateway.codec.contract import StateStore
from gateway.records import record


@runtime_checkable
class Closes(Protocol):
    """A store with connections of its own, closed with the app that made it."""

    async def aclose(self) -> None: ...


@record
class StoreLimits:
    max_entries: int
    max_bytes: int


class MemoryStore:
    """The in-process store: a dict in insertion order (an update moves an entry to the end)."""

    __slots__ = ("_bytes", "_entries", "_limits")

    def __init__(self, limits: StoreLimits) -> None:
        self._limits = limits
        self._entries: dict[tuple[str, str], bytes] = {}
        self._bytes = 0

    async def get(self, owner: str, key: str) -> bytes | None:
        return self._entries.get((owner, key))

    async def put(self, owner: str, key: str, value: bytes) -> None:
        if len(value) > self._limits.max_bytes:
            return  # larger than the whole store: not kept (a later lookup finds nothing)
        slot = (owner, key)
        old = self._entries.pop(slot, None)
        if old is not None:
            self._bytes -= len(old)
        self._entries[slot] = value
        self._bytes += len(value)
        while len(self._entries) > self._limits.max_entries or self._bytes > self._limits.max_bytes:
            oldest = next(iter(self._entries))
            self._bytes -= len(self._entries.pop(oldest))

    async def delete(self, owner: str, key: str) -> bool:
        old = self._entries.pop((owner, key), None)
        if old is None:
            return False
        self._bytes -= len(old)
        return True

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes


def make_store(conf: cfg.ResponsesStore) -> StateStore:
    """The store the config asks for."""
    if conf.redis_url is not None:
        from gateway.proxy.redisstate import RedisStore  # the redis client is loaded only for it

        return RedisStore(conf.redis_url, conf.ttl_s)
    return MemoryStore(StoreLimits(conf.max_entries, conf.max_bytes))
