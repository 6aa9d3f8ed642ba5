"""Backends reached through an egress proxy: which proxy the environment or a backend's `proxy:`
names, which hosts bypass it (`no_proxy`), and what goes through it: a CONNECT tunnel carrying
TLS to an https backend, requests in absolute form to an http one, the proxy's credentials to the
proxy only. The proxy is a small one written here, every name it is asked for dialled at
127.0.0.1: a backend named `backend.test` is reachable through it and no other way."""

import asyncio
import base64
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from yarl import URL

from gateway.app import BACKENDS, create_app
from gateway.config import parse_config
from gateway.redact import REDACT
from gateway.upstream import DIRECT, Egress
from gateway.upstream.egress import Bypass, Proxy
from tests.conftest import one_route
from tests.fixtures.openai.wire import load
from tests.support import FakeUpstream, issue_cert, json_reply, write_pem

USER, PASSWORD = "gw", "s3cret-pa55"
CREDENTIALS = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


class HttpProxy:
    """An HTTP proxy on loopback: CONNECT tunnels, and requests in absolute form relayed one at a
    time (their answers framed by Content-Length). `heads` is every request head it was sent;
    `refuse`, when set, is what a CONNECT gets instead of a tunnel."""

    def __init__(self, refuse: bytes | None = None) -> None:
        self.refuse = refuse
        self.heads: list[bytes] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> "HttpProxy":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def url(self, credentials: bool = True) -> str:
        return f"http://{USER}:{PASSWORD}@127.0.0.1:{self.port}" if credentials else f"http://127.0.0.1:{self.port}"

    def lines(self, name: bytes) -> list[bytes]:
        """The value of header `name` in each head, in order (b"" where a head has none)."""
        found = []
        for head in self.heads:
            values = [line.partition(b":")[2].strip() for line in head.split(b"\r\n") if line.lower().startswith(name)]
            found.append(values[0] if values else b"")
        return found

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                method, target = head.split(b" ")[:2]
                if method == b"CONNECT":
                    await self._tunnel(target, reader, writer)
                    return
                await self._relay(method, URL(target.decode()), head, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _tunnel(self, target: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refuse is not None:
            writer.write(self.refuse)
            await writer.drain()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", int(target.rpartition(b":")[2]))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def _relay(
        self, method: bytes, url: URL, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        lines = [line for line in head[:-4].split(b"\r\n")[1:] if not line.lower().startswith(b"proxy-authorization:")]
        body = await reader.readexactly(_length(head))
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", url.port)
        up_writer.write(b"\r\n".join([b"%s %s HTTP/1.1" % (method, url.raw_path_qs.encode()), *lines]) + b"\r\n\r\n")
        up_writer.write(body)
        answer = await up_reader.readuntil(b"\r\n\r\n")
        writer.write(answer + await up_reader.readexactly(_length(answer)))
        up_writer.close()


def _length(head: bytes) -> int:
    sizes = [int(line[15:]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    return sizes[0] if sizes else 0


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the proxy variables it means; none come from the machine's environment."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Callable[[str], ssl.SSLContext]]:
    """A test CA's file, and a server TLS context for a certificate it issues to a name."""
    folder = tmp_path_factory.mktemp("egress-pki")
    authority = issue_cert("egress test CA")
    ca_file = write_pem(folder, "ca", authority)[0]

    def server(name: str) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(*write_pem(folder, name, issue_cert(name, authority, [name])))
        return ctx

    return Path(ca_file), server


@pytest.fixture
async def https_backend(aiohttp_server: Any, ca: Any) -> AsyncIterator[Callable[[str], Any]]:
    """An https backend whose certificate names `name`: (its FakeUpstream, its port)."""

    async def start(name: str) -> tuple[FakeUpstream, int]:
        up = FakeUpstream()
        up.reply = json_reply(load("chat_response.json"))
        server = await aiohttp_server(up.app(), ssl=ca[1](name))
        return up, server.port

    yield start


# ---- through a tunnel, to an https backend -------------------------------------------------------


async def test_an_https_backend_is_reached_through_a_connect_tunnel(
    make_gateway: Any, https_backend: Any, ca: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    up, port = await https_backend("backend.test")
    async with HttpProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url())
        gw = await make_gateway(one_route("openai", "openai", f"https://backend.test:{port}", tls={"ca": str(ca[0])}))
        for _ in range(2):
            resp = await gw.post("/v1/chat/completions", json=CHAT)
            assert resp.status == 200, await resp.text()
        assert (await gw.get("/readyz")).status == 200
    # One tunnel, kept for every request and the probe; the credentials went to the proxy alone.
    assert [h.split(b"\r\n")[0] for h in proxy.heads] == [b"CONNECT backend.test:%d HTTP/1.1" % port]
    assert proxy.lines(b"proxy-authorization:") == [CREDENTIALS.encode()]
    assert [r.path for r in up.requests] == ["/v1/chat/completions"] * 2 + ["/v1/models"]
    assert all("Proxy-Authorization" not in r.headers for r in up.requests)
    assert up.requests[0].headers["Host"] == f"backend.test:{port}"


async def test_a_certificate_for_another_name_is_refused_through_the_tunnel(
    make_gateway: Any, https_backend: Any, ca: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    up, port = await https_backend("other.test")
    async with HttpProxy() as proxy:
        monkeypatch.setenv("https_proxy", proxy.url(credentials=False))
        gw = await make_gateway(one_route("openai", "openai", f"https://backend.test:{port}", tls={"ca": str(ca[0])}))
        with caplog.at_level(logging.WARNING, logger="gateway"):
            resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 502, await resp.text()
    assert len(proxy.heads) >= 1 and up.requests == []
    assert any("SSLCertVerificationError" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "refusal",
    [
        b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\n\r\nforbidden",
        b"HTTP/1.1 502 Bad Gateway\r\n\r\n",
    ],
    ids=["407", "403", "502"],
)
async def test_a_proxy_refusing_the_tunnel_is_a_connect_failure_the_log_names(
    make_gateway: Any, ca: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any, refusal: bytes
) -> None:
    async with HttpProxy(refuse=refusal) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url())
        config = one_route("openai", "openai", "https://backend.test:1", tls={"ca": str(ca[0])})
        config["backends"]["up"]["urls"] = [config["backends"]["up"].pop("url"), "https://backend.test:2"]
        gw = await make_gateway(config)
        with caplog.at_level(logging.WARNING, logger="gateway"):
            resp = await gw.post("/v1/chat/completions", json=CHAT)
    body = await resp.json()
    assert resp.status == 502 and "unreachable" in body["error"]["message"], body
    assert len(proxy.heads) == 2  # one refusal for each replica: the next one was tried
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    status = refusal.split(b" ")[1].decode()
    refused = f"the proxy http://127.0.0.1:{proxy.port} refused a tunnel to backend.test:"
    assert sum(refused in m and f": {status}" in m for m in said) == 2
    assert not any(PASSWORD in m or CREDENTIALS.split()[1] in m for m in said)


async def test_a_proxy_that_is_down_is_a_connect_failure_the_log_names(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    async with HttpProxy() as proxy:
        down = proxy.url()
    monkeypatch.setenv("HTTP_PROXY", down)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    with caplog.at_level(logging.WARNING, logger="gateway"):
        resp = await gw.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 502, await resp.text()
    assert upstream.requests == []  # the backend, reachable directly, is not tried around the proxy
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"the proxy http://127.0.0.1:{proxy.port}: ConnectionRefusedError" in m for m in said), said


# ---- absolute form, to an http backend ---------------------------------------------------------


async def test_an_http_backend_is_asked_in_absolute_form_with_the_credentials_each_time(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream.reply = json_reply(load("chat_response.json"))
    port = URL(upstream.url).port
    async with HttpProxy() as proxy:
        monkeypatch.setenv("http_proxy", proxy.url())
        gw = await make_gateway(one_route("openai", "openai", f"http://backend.test:{port}/base?k=v"))
        for _ in range(2):
            resp = await gw.post("/v1/chat/completions", json=CHAT)
            assert resp.status == 200, await resp.text()
    target = b"http://backend.test:%d/base/v1/chat/completions?k=v" % port
    assert [h.split(b"\r\n")[0] for h in proxy.heads] == [b"POST %s HTTP/1.1" % target] * 2
    assert proxy.lines(b"proxy-authorization:") == [CREDENTIALS.encode()] * 2
    assert proxy.lines(b"host:") == [b"backend.test:%d" % port] * 2


@pytest.mark.parametrize(
    ("no_proxy", "via_proxy"),
    [("", True), ("localhost", True), ("127.0.0.1", False), ("10.0.0.0/8,127.0.0.0/8", False), ("*", False)],
)
async def test_no_proxy_decides_whether_loopback_goes_through_the_proxy(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, no_proxy: str, via_proxy: bool
) -> None:
    """Loopback is not exempt unless listed, as curl and httpx have it."""
    upstream.reply = json_reply(load("chat_response.json"))
    async with HttpProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url(credentials=False))
        monkeypatch.setenv("NO_PROXY", no_proxy)
        gw = await make_gateway(one_route("openai", "openai", upstream.url))
        resp = await gw.post("/v1/chat/completions", json=CHAT)
        assert resp.status == 200, await resp.text()
    assert (len(proxy.heads), len(upstream.requests)) == (int(via_proxy), 1)


async def test_a_backends_own_proxy_setting_overrides_the_environment(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream.reply = json_reply(load("chat_response.json"))
    async with HttpProxy() as mine, HttpProxy() as theirs:
        monkeypatch.setenv("HTTP_PROXY", theirs.url())
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        config = one_route("openai", "openai", upstream.url, proxy=mine.url(credentials=False))
        config["backends"]["direct"] = {"dialect": "openai", "url": upstream.url, "proxy": "none"}
        config["routes"].append({"name": "d", "dialect": "openai", "backend": "direct", "prefix": "/d"})
        gw = await make_gateway(config)
        for path in ("/v1/chat/completions", "/d/v1/chat/completions"):
            assert (await gw.post(path, json=CHAT)).status == 200
    assert (len(mine.heads), len(theirs.heads), len(upstream.requests)) == (1, 0, 2)


async def test_proxy_credentials_are_secrets_in_the_log(make_gateway: Any, upstream: FakeUpstream) -> None:
    await make_gateway(one_route("openai", "openai", upstream.url, proxy=f"http://{USER}:{PASSWORD}@proxy.corp:3128"))
    shown = REDACT(f"proxy {USER}:{PASSWORD} says {CREDENTIALS}")
    assert PASSWORD not in shown and CREDENTIALS.split()[1] not in shown


# ---- which proxy, from the environment ---------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "scheme", "proxy"),
    [
        ({"HTTPS_PROXY": "http://p:1"}, "https", "http://p:1"),
        ({"HTTPS_PROXY": "http://p:1"}, "http", None),
        ({"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:1"}, "https", "http://lower:1"),
        ({"https_proxy": "", "HTTPS_PROXY": "http://upper:1"}, "https", None),  # set empty: none
        ({"HTTP_PROXY": "http://p:1"}, "http", "http://p:1"),
        ({"ALL_PROXY": "http://all:1"}, "https", "http://all:1"),
        ({"all_proxy": "http://all:1", "http_proxy": "http://h:1"}, "http", "http://h:1"),
        ({"HTTPS_PROXY": "proxy.corp:3128"}, "https", "http://proxy.corp:3128"),  # no scheme: http
        ({"HTTPS_PROXY": "http://proxy.corp"}, "https", "http://proxy.corp:80"),
        ({"HTTPS_PROXY": "http://[fd00::1]:3128/"}, "https", "http://[fd00::1]:3128"),
    ],
)
def test_which_proxy_the_environment_names(environ: dict[str, str], scheme: str, proxy: str | None) -> None:
    found = Egress.of(None, environ, [f"{scheme}://backend"]).proxy_for(scheme, "backend", 443)
    assert (found.shown if found else None) == proxy


def test_a_backends_setting_wins_over_the_environment_and_no_proxy() -> None:
    environ = {"HTTPS_PROXY": "http://env:1", "NO_PROXY": "*"}
    assert Egress.of("none", environ, ["https://b"]) == DIRECT
    mine = Egress.of("http://mine:2", environ, ["https://b"]).proxy_for("https", "b", 443)
    assert mine is not None and mine.shown == "http://mine:2"


@pytest.mark.parametrize(
    ("host", "port", "entries", "bypass"),
    [
        ("example.com", 443, "example.com", True),
        ("api.example.com", 443, "example.com", True),
        ("notexample.com", 443, "example.com", False),
        ("example.com", 443, ".example.com", True),  # curl: the leading dot is ignored
        ("api.example.com", 443, ".example.com", True),
        ("api.example.com", 443, "*.example.com", True),
        ("API.Example.COM.", 443, "example.com.", True),
        ("example.com", 443, "other.org, example.com", True),
        ("example.com", 443, "other.org example.com", True),
        ("anything", 1, "*", True),
        ("anything", 1, "example.com,*", True),
        ("example.com", 8443, "example.com:8443", True),
        ("example.com", 443, "example.com:8443", False),
        ("10.1.2.3", 80, "10.1.2.3", True),
        ("10.1.2.3", 80, "10.0.0.0/8", True),
        ("11.1.2.3", 80, "10.0.0.0/8", False),
        ("10.1.2.3", 8000, "10.1.2.3:8000", True),
        ("::1", 80, "::1", True),
        ("fd00::5", 80, "[fd00::]/16", True),
        ("::1", 8080, "[::1]:8080", True),
        ("::1", 80, "[::1]:8080", False),
        ("127.0.0.1", 80, "example.com", False),  # loopback is not exempt unless listed
        ("localhost", 80, "localhost", True),
        ("127.0.0.1", 80, "localhost", False),  # a name is not resolved to match an address
    ],
)
def test_no_proxy_entries(host: str, port: int, entries: str, bypass: bool) -> None:
    assert ((host, port) in Bypass(entries)) is bypass


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("socks5://u:pw-secret@p:1080", "socks5://p:1080: only an http:// proxy is supported"),
        ("https://p:443", "https://p:443: only an http:// proxy is supported"),
        ("http://u:pw-secret@p:99999", "http://p:99999: not a proxy URL"),
        ("http://", "http://: not a proxy URL (it names no host)"),
    ],
)
def test_a_proxy_url_the_gateway_cannot_use_is_refused_without_its_credentials(url: str, problem: str) -> None:
    with pytest.raises(ValueError) as e:
        Proxy.of(url)
    assert str(e.value).startswith(problem) and "pw-secret" not in str(e.value)


def test_the_app_holds_the_environment_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy is decided when the backend is built, not per request."""
    monkeypatch.setenv("HTTPS_PROXY", "http://p:1")
    app = create_app(parse_config(one_route("openai", "openai", "https://backend.test")))
    monkeypatch.setenv("HTTPS_PROXY", "http://other:2")
    target = app[BACKENDS]["up"].target("https://backend.test", "/v1/models")
    assert target.proxy is not None and target.proxy.shown == "http://p:1"
