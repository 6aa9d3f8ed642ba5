"""Who is calling: how a request came, the client's address behind trusted proxies, and an API
key's log name."""

import hashlib
import ipaddress
from collections.abc import Mapping, Sequence

from gateway.records import record

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


@record
class Arrival:
    """How a request came, as the layers below the HTTP handler know it: they get this, not the
    HTTP request."""

    request_id: str
    method: str
    path: str
    headers: Mapping[str, str]  # the client's, by any case of their names
    peer: str | None  # the address the connection came from

    def client(self, trusted: Sequence[Network]) -> str | None:
        """The client it counts against and the access log names: `client_address` of its peer
        and X-Forwarded-For."""
        return client_address(self.peer, self.headers.get("X-Forwarded-For"), trusted)


def key_id(key: str) -> str:
    """What the access log says of an API key: a short hash, never the key."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:10]
