"""Where a request goes: a backend URL and a path under it, parsed once into what the pool dials
(host and port, a unix socket, or a proxy) and the request target it writes.

A backend URL is one of (docs/upstream.md, "Backend URLs"):
- `http://host[:port][/prefix][?query]`, or `https://…`;
- `unix:/path/to.sock`: plain HTTP over a unix socket, the server's root its base;
- `http+unix://%2Fpath%2Fto.sock/prefix?query`: the same with a base path, the socket's path
  percent-encoded in the host's place (as requests-unixsocket writes it).
`join` puts a path under a base URL: after the base's path, and with the base's query kept, ahead
of any query the path has of its own.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from yarl import URL

from gateway.upstream import egress
from gateway.upstream.egress import Egress, Proxy

P = TypeVar("P", bound=asyncio.Protocol)

# The Host a unix-socket backend gets: what curl --unix-socket sends.
UNIX_HOST = "localhost"


@dataclass(frozen=True, slots=True)
class Target:
    """Where a request goes: an origin and the request target, parsed once."""

    key: tuple[str, str, int]  # the connections it may share: scheme (and proxy), host, port
    host: str  # the host, or a unix socket's path
    port: int  # 0 for a unix socket
    tls: bool
    path: bytes  # the request target, percent-encoded (in absolute form through an http proxy)
    host_header: bytes
    authorization: str | None  # Basic credentials from the URL's user:password, if any
    socket: str | None = None  # a unix socket, dialled in place of host:port
    proxy: Proxy | None = None  # the proxy dialled in place of the origin
    hop: bytes = b""  # header lines for an http proxy, on each request: its credentials

    @classmethod
    def of(cls, base: str, path: str = "", via: Egress | None = None) -> Target:
        """`path` under the backend URL `base` (see `join`), reached as `via` says (directly
        without it). A ValueError says what is wrong with a URL the gateway cannot reach."""
        socket, url = _unix(base)
        u = URL(join(url, path))
        if u.scheme not in ("http", "https") or not u.raw_host:
            raise ValueError(f"not an http(s) or unix-socket URL: {shown_url(base)!r}")
        if u.raw_fragment:
            raise ValueError(f"a backend URL has no #fragment to send: {shown_url(base)!r}")
        host = u.raw_host
        port = u.port or (443 if u.scheme == "https" else 80)
        shown = f"[{host}]" if ":" in host else host
        if not u.is_default_port():
            shown = f"{shown}:{port}"
        auth = None if u.raw_user is None else "Basic " + egress.basic(u.raw_user, u.raw_password or "")
        target = (u.raw_path_qs or "/").encode("ascii")
        host_header = shown.encode("ascii")  # yarl keeps a host name in its IDNA form
        if socket is not None:
            return cls(("unix", socket, 0), socket, 0, False, target, host_header, auth, socket)
        proxy = via.proxy_for(u.scheme, host, port) if via is not None else None
        if proxy is None:
            return cls((u.scheme, host, port), host, port, u.scheme == "https", target, host_header, auth)
        key = (f"{u.scheme} via {proxy.shown}", host, port)
        if u.scheme == "https":  # through a tunnel: the proxy sees only the CONNECT
            return cls(key, host, port, True, target, host_header, auth, None, proxy)
        hop = b"" if proxy.authorization is None else b"Proxy-Authorization: %s\r\n" % proxy.authorization.encode()
        return cls(key, host, port, False, b"http://%s%s" % (host_header, target), host_header, auth, None, proxy, hop)

    def dial(
        self, loop: asyncio.AbstractEventLoop, factory: Callable[[], P], ctx: ssl.SSLContext | None
    ) -> Awaitable[tuple[asyncio.BaseTransport, P]]:
        """Open a connection for it: to the origin, its socket, or through its proxy."""
        if self.socket is not None:
            return loop.create_unix_connection(factory, self.socket)
        if self.proxy is None:
            name = self.host if ctx is not None else None
            return loop.create_connection(factory, self.host, self.port, ssl=ctx, server_hostname=name)
        if ctx is None:
            return egress.through(loop, factory, self.proxy)
        return egress.tunnel(loop, factory, self.proxy, self.host, self.port, ctx)


def join(base: str, path: str) -> str:
    """`path` under the URL `base`: after the base's path (less a trailing slash), the base's
    query kept and the path's own (if any) after it, joined by `&`."""
    if not path:
        return base
    base, _, query = base.partition("?")
    path, _, own = path.partition("?")
    query = f"{query}&{own}" if query and own else query or own
    return base.rstrip("/") + path + ("?" + query if query else "")


def check_url(url: str) -> str:
    """`url` when it is a backend URL the gateway can reach; a ValueError that says why not."""
    Target.of(url)
    return url


def _unix(url: str) -> tuple[str | None, str]:
    """A unix-socket URL as its socket and the http:// URL it stands for (host `localhost`);
    any other URL as it is. nginx's spelling, `http://unix:/path:/uri`, is refused."""
    scheme, _, rest = url.partition(":")
    scheme = scheme.lower()
    if scheme == "unix":
        path = rest.removeprefix("//")  # unix:///path, as Docker writes it
        if "?" in path or "#" in path:
            raise ValueError(f"{url!r}: a unix: URL names only a socket; write http+unix://… for a query")
        return _socket(url, path), f"http://{UNIX_HOST}/"
    if scheme == "http+unix" and rest.startswith("//"):
        cut = min((i for i in (rest.find(c, 2) for c in "/?#") if i >= 0), default=len(rest))
        userinfo, at, socket = rest[2:cut].rpartition("@")
        return _socket(url, unquote(socket)), f"http://{userinfo}{at}{UNIX_HOST}{rest[cut:]}"
    if scheme in ("http", "https") and rest[:8].lower() == "//unix:/":
        socket, _, uri = rest[7:].partition(":")
        instead = f"unix:{socket}" if uri in ("", "/") else f"http+unix://{quote(socket, safe='')}{uri}"
        raise ValueError(f"{shown_url(url)!r} is nginx's spelling of a unix socket; write {instead!r}")
    return None, url


def _socket(url: str, path: str) -> str:
    if not path.startswith("/"):
        raise ValueError(f"{shown_url(url)!r}: a unix socket's path must be absolute (unix:/run/server.sock)")
    return path


def shown_url(url: str) -> str:
    """A backend URL fit for logs: without any user:password, and its query's values hidden
    (a query may carry a token)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = "&".join(p.partition("=")[0] + "=…" for p in parts.query.split("&")) if parts.query else ""
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))
