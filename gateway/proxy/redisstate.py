"""What stateful inbound APIs keep (codec.contract.StateStore), in Redis: shared by the worker
processes of one gateway and by its replicas (`responses_store.redis_url`).

Each entry is one string key, `gateway:state:<owner>:<key>` with the owner's name hex-encoded (so
no owner's keys can be read as another's), written with the configured time to live: Redis lets
go of what outlives it (and, under its own memory policy, of what it must). The client is
`redis`'s asyncio one; its connections open on first use, in the event loop that uses them.
"""

from collections.abc import Awaitable
from typing import TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.neutral.errors import Unavailable

PREFIX = "gateway:state:"
T = TypeVar("T")


def key_name(owner: str, key: str) -> str:
    return f"{PREFIX}{owner.encode().hex()}:{key}"


async def _reached(aw: Awaitable[T]) -> T:
    """`aw`, or a 503 for the client when Redis cannot be reached or fails."""
    try:
        return await aw
    except (RedisError, OSError) as e:
        raise Unavailable(f"the gateway's state store is unavailable ({type(e).__name__})") from None


class RedisStore:
    __slots__ = ("_redis", "_ttl_ms")

    def __init__(self, url: str, ttl_s: float) -> None:
        self._redis = Redis.from_url(url)
        self._ttl_ms = max(1, int(ttl_s * 1000))

    async def get(self, owner: str, key: str) -> bytes | None:
        value = await _reached(self._redis.get(key_name(owner, key)))
        return value.encode() if isinstance(value, str) else value

    async def put(self, owner: str, key: str, value: bytes) -> None:
        await _reached(self._redis.set(key_name(owner, key), value, px=self._ttl_ms))

    async def delete(self, owner: str, key: str) -> bool:
        return bool(await _reached(self._redis.delete(key_name(owner, key))))

    async def aclose(self) -> None:
        await self._redis.aclose()
