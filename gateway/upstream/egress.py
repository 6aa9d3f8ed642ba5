"""Egress proxies: which proxy a backend is reached through, and the tunnel through one.

A backend's `proxy:` setting (a proxy URL, or `none`) decides for all its URLs. Without one the
environment does, read as curl and Python's HTTP clients read it: `https_proxy` for https
backends, `http_proxy` for http ones, `all_proxy` for either, each name in lower case before
upper case; `no_proxy` lists the hosts reached directly (`Bypass`). `Egress` holds that decision
for one backend, made when the backend is built; a Target asks it once (docs/upstream.md, "Egress
proxies").

An http backend is asked through the proxy in absolute form, the proxy's credentials on each
request; an https backend through a CONNECT tunnel (`tunnel`), the credentials on the CONNECT
only, then TLS to the backend inside the tunnel, its name verified as it would be directly.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import re
import ssl
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import unquote, urlsplit

from gateway.upstream.faults import ConnectFailed

P = TypeVar("P", bound=asyncio.Protocol)
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# The most of a proxy's answer to CONNECT that is read looking for its end.
MAX_CONNECT_ANSWER = 16 * 1024
_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})([^\r\n]*)\r?\n")


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy: where it listens, and the credentials its URL carries."""

    host: str
    port: int
    authorization: str | None  # "Basic …", sent to the proxy and never to the backend
    shown: str  # http://host:port, without the credentials: what logs say
    secrets: tuple[str, ...] = ()  # the credentials as written, decoded and sent: never shown

    @classmethod
    def of(cls, url: str) -> Proxy:
        """The proxy at `url` (http:// assumed when it names no scheme, as curl does); a
        ValueError, never quoting its credentials, for one the gateway cannot use."""
        text = url.strip()
        parts = urlsplit(text if "://" in text else "http://" + text)
        shown = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
        if parts.scheme != "http":
            raise ValueError(f"{shown}: only an http:// proxy is supported (CONNECT is sent to it in plain HTTP)")
        try:
            host, port = parts.hostname, parts.port or 80
        except ValueError:
            raise ValueError(f"{shown}: not a proxy URL (its port is not a number from 0 to 65535)") from None
        if not host:
            raise ValueError(f"{shown}: not a proxy URL (it names no host)")
        named = f"[{host}]" if ":" in host else host
        if parts.username is None:
            return cls(host, port, None, f"http://{named}:{port}")
        password = parts.password or ""
        token = basic(parts.username, password)
        hidden = (token, f"{unquote(parts.username)}:{unquote(password)}", password, unquote(password))
        return cls(host, port, "Basic " + token, f"http://{named}:{port}", tuple(s for s in hidden if s))


class Bypass:
    """A `no_proxy` list: the hosts reached directly. Entries are separated by commas or blanks.

    As curl reads it: `*` is every host (curl takes it only as the whole list, httpx as any
    entry, as here); a name matches itself and every name under it
    (`example.com` and `.example.com` both match example.com and api.example.com, never
    notexample.com; a leading `*.` is read as `.`); an IP address or CIDR block matches the
    addresses in it. As Python's clients read it, `name:port` matches that port only. Loopback
    is not exempt unless listed.
    """

    __slots__ = ("_every", "_names", "_networks")

    def __init__(self, spec: str) -> None:
        self._every = False
        self._names: list[tuple[str, int | None]] = []
        self._networks: list[Network] = []
        for token in spec.replace(",", " ").split():
            if token == "*":
                self._every = True
                continue
            name, port = token, None
            if token.startswith("["):  # [v6], [v6]/bits, [v6]:port
                inside, _, after = token[1:].partition("]")
                name = inside + after
                if after[:1] == ":" and after[1:].isdigit():
                    name, port = inside, int(after[1:])
            elif token.count(":") == 1:  # v4 or a name, with a port
                host, _, digits = token.partition(":")
                if digits.isdigit():
                    name, port = host, int(digits)
            if port is None:
                try:
                    self._networks.append(ipaddress.ip_network(name, strict=False))
                    continue
                except ValueError:
                    pass
            self._names.append((name.lower().removeprefix("*").strip("."), port))

    def __contains__(self, origin: tuple[str, int]) -> bool:
        if self._every:
            return True
        host, port = origin
        name = host.lower().rstrip(".")
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            address = None
        if address is not None and any(address in net for net in self._networks):
            return True
        for entry, only in self._names:
            if (only is None or only == port) and (name == entry or name.endswith("." + entry)):
                return True
        return False


@dataclass(frozen=True, slots=True)
class Egress:
    """How one backend's connections leave: the proxy for each scheme, and the hosts that
    bypass it."""

    http: Proxy | None = None
    https: Proxy | None = None
    bypass: Bypass | None = None

    @classmethod
    def of(cls, setting: str | None, environ: Mapping[str, str], urls: Collection[str]) -> Egress:
        """The egress for a backend at `urls`, given its `proxy:` setting (None: the environment
        decides). A ValueError names the setting or variable that is unusable; a variable for a
        scheme none of the URLs has is not read."""
        schemes = {u.partition(":")[0].lower() for u in urls}
        if setting is not None:
            if setting.strip().lower() == "none":
                return DIRECT
            proxy = Proxy.of(setting)
            return cls(proxy, proxy)
        found: dict[str, Proxy | None] = {}
        for scheme in ("http", "https"):
            name, value = _variable(environ, f"{scheme}_proxy")
            if value is None:
                name, value = _variable(environ, "all_proxy")
            if scheme not in schemes or not value:
                found[scheme] = None
                continue
            try:
                found[scheme] = Proxy.of(value)
            except ValueError as e:
                raise ValueError(f"{name} (from the environment): {e}") from None
        if not any(found.values()):
            return DIRECT
        _, bypass = _variable(environ, "no_proxy")
        return cls(found["http"], found["https"], Bypass(bypass) if bypass else None)

    def proxy_for(self, scheme: str, host: str, port: int) -> Proxy | None:
        proxy = self.https if scheme == "https" else self.http
        if proxy is None or (self.bypass is not None and (host, port) in self.bypass):
            return None
        return proxy

    def secrets(self) -> list[str]:
        """The proxies' credentials, for the log's redaction."""
        return [s for p in (self.http, self.https) if p is not None for s in p.secrets]


DIRECT = Egress()


def check_proxy(setting: str) -> str:
    """A backend's `proxy:` setting when the gateway can use it; a ValueError that says why not."""
    Egress.of(setting, {}, ())
    return setting


def basic(user: str, password: str) -> str:
    """The Basic credentials of a URL's user and password (percent-encoded, as a URL has them)."""
    return base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")


def _variable(environ: Mapping[str, str], name: str) -> tuple[str, str | None]:
    """A variable by its lower-case name, else its upper-case one (set, even empty, the lower
    case wins, as curl and Python read them)."""
    for n in (name, name.upper()):
        if n in environ:
            return n, environ[n].strip()
    return name, None


async def through(
    loop: asyncio.AbstractEventLoop, factory: Callable[[], P], proxy: Proxy
) -> tuple[asyncio.Transport, P]:
    """A connection to the proxy itself, for requests in absolute form."""
    try:
        transport, protocol = await loop.create_connection(factory, proxy.host, proxy.port)
    except OSError as e:
        raise ConnectFailed(f"the proxy {proxy.shown}: {type(e).__name__}: {e}") from None
    return transport, protocol


async def tunnel(
    loop: asyncio.AbstractEventLoop,
    factory: Callable[[], P],
    proxy: Proxy,
    host: str,
    port: int,
    ctx: ssl.SSLContext,
) -> tuple[asyncio.Transport, P]:
    """A TLS connection to host:port through a CONNECT tunnel of `proxy`, the backend's
    certificate verified for `host`. A proxy that refuses the tunnel is ConnectFailed."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        raw, answer = await loop.create_connection(lambda: _Answer(loop), proxy.host, proxy.port)
    except OSError as e:
        raise ConnectFailed(f"the proxy {proxy.shown}: {type(e).__name__}: {e}") from None
    try:
        head = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
        if proxy.authorization is not None:
            head += f"Proxy-Authorization: {proxy.authorization}\r\n"
        raw.write(head.encode("ascii") + b"\r\n")
        status, reason = await answer.status
        if not 200 <= status < 300:
            raise ConnectFailed(f"the proxy {proxy.shown} refused a tunnel to {authority}: {status} {reason}".rstrip())
        protocol = factory()
        transport = await loop.start_tls(raw, protocol, ctx, server_hostname=host)
    except (OSError, ValueError) as e:  # the backend's TLS handshake failed, or did not verify
        raw.close()
        raise ConnectFailed(f"{type(e).__name__} (through the proxy {proxy.shown}): {e}") from None
    except BaseException:
        raw.close()
        raise
    if transport is None:  # the proxy closed the tunnel during the handshake
        raise ConnectFailed(f"the proxy {proxy.shown} closed the tunnel to {authority}")
    protocol.connection_made(transport)  # start_tls hands over the transport without it
    return transport, protocol


class _Answer(asyncio.Protocol):
    """Reads a proxy's answer to CONNECT: its status, once its head has come."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.status: asyncio.Future[tuple[int, str]] = loop.create_future()
        self._transport: asyncio.Transport | None = None
        self._buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.status.done():
            return
        self._buf += data
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_CONNECT_ANSWER:
                self._fail("the proxy's answer to CONNECT has no end")
            return
        m = _STATUS.match(self._buf)
        if m is None:
            self._fail("the proxy's answer to CONNECT is not HTTP/1.1")
            return
        status = int(m.group(1))
        reason = "".join(c for c in m.group(2).decode("latin-1").strip()[:80] if c.isprintable())
        if 200 <= status < 300:
            assert self._transport is not None
            self._transport.pause_reading()  # the backend's TLS handshake takes it from here
            if end + 4 < len(self._buf):
                self._fail("the proxy sent bytes past its answer to CONNECT")
                return
        self.status.set_result((status, reason))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.status.done():
            self._fail("the proxy closed the connection without answering CONNECT")

    def _fail(self, why: str) -> None:
        if not self.status.done():
            self.status.set_exception(ConnectFailed(why))
