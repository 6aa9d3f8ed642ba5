"""Who is calling: the client's address behind trusted proxies, and an API key's log name."""

import hashlib
import ipaddress
from collections.abc import Sequence

from aiohttp import web

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _trusted(addr: str, trusted: Sequence[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return any(ip in net for net in trusted)


def client_address(peer: str | None, forwarded_for: str | None, trusted: Sequence[Network]) -> str | None:
    """The peer, or, when the peer is a trusted proxy, the nearest X-Forwarded-For hop that is not.

    Hops are read from the right (the one the nearest proxy added) and believed only while the
    address that reported them is trusted; a hop that is not an IP address ends the walk.
    """
    if peer is None or not forwarded_for or not trusted:
        return peer
    addr = peer
    for hop in reversed(forwarded_for.split(",")):
        if not _trusted(addr, trusted):
            break
        hop = hop.strip()
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            break
        addr = hop
    return addr


def client_of(request: web.Request, trusted: Sequence[Network]) -> str | None:
    """The client a request counts against and the access log names: `client_address` of its
    peer and X-Forwarded-For."""
    return client_address(request.remote, request.headers.get("X-Forwarded-For"), trusted)


def key_id(key: str) -> str:
    """What the access log says of an API key: a short hash, never the key."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:10]
