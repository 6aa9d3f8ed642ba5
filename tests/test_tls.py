"""TLS on both sides: a MindIE backend behind mutual TLS (its usual setup), and the gateway's own
HTTPS listener requiring client certificates. Certificates are made for each run."""

import ssl

import aiohttp
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import parse_config
from tests.support import issue_cert, write_pem

INFER_ANSWER = {"generated_text": " over TLS", "details": {"finish_reason": "eos_token", "generated_tokens": 2}}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    folder = tmp_path_factory.mktemp("pki")
    ca = issue_cert("test CA")
    out = {"ca": write_pem(folder, "ca", ca)}
    for name, san in (("server", ["127.0.0.1"]), ("client", [])):
        out[name] = write_pem(folder, name, issue_cert(name, ca, san))
    return out


def _server_ctx(pki: dict[str, tuple[str, str]]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*pki["server"])
    ctx.load_verify_locations(pki["ca"][0])
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


@pytest.fixture
async def mtls_mindie(aiohttp_server, pki):  # type: ignore[no-untyped-def]
    """A MindIE-like backend that only talks to clients holding a certificate from the test CA."""
    peers: list[str] = []

    async def infer(request: web.Request) -> web.Response:
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        peers.append(dict(x[0] for x in cert["subject"])["commonName"] if cert else "")
        return web.json_response(INFER_ANSWER)

    app = web.Application()
    app.router.add_post("/infer", infer)
    server = await aiohttp_server(app, ssl=_server_ctx(pki))
    return f"https://127.0.0.1:{server.port}", peers


def _config(url: str, tls: dict | None) -> dict:
    backend = {"dialect": "mindie", "url": url, "model": "m", **({"tls": tls} if tls else {})}
    return {"backends": {"mindie": backend}, "routes": [{"name": "r", "dialect": "openai", "backend": "mindie"}]}


async def test_mutual_tls_to_a_mindie_backend(aiohttp_client, mtls_mindie, pki):
    url, peers = mtls_mindie
    tls = {"ca": pki["ca"][0], "cert": pki["client"][0], "key": pki["client"][1]}
    gw = await aiohttp_client(create_app(parse_config(_config(url, tls))))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 2})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["choices"][0]["text"] == " over TLS"
    assert peers == ["client"]  # the backend saw the gateway's client certificate


async def test_backend_refusing_the_handshake_is_a_clear_error(aiohttp_client, mtls_mindie, pki, caplog):
    url, peers = mtls_mindie
    # Trusts the server but presents no client certificate: the backend ends the handshake.
    gw = await aiohttp_client(create_app(parse_config(_config(url, {"ca": pki["ca"][0]}))))
    resp = await gw.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 2})
    body = await resp.json()
    # TLS 1.3 servers reject a missing client certificate just after the handshake, so this is
    # a failed exchange (502) rather than a refused connection; the operator's log says why.
    assert resp.status in (502, 503), body
    assert body["error"]["message"].startswith("backend 'mindie'")
    assert any(r.levelname == "WARNING" and "backend mindie" in r.getMessage() for r in caplog.records)
    assert peers == []


async def test_gateway_listener_with_client_certificates(aiohttp_server, mtls_mindie, pki):
    """listen.tls with client_ca: only clients holding a certificate from that CA get in."""
    from gateway.server import listen_ssl as _listen_ssl

    url, _ = mtls_mindie
    tls = {"ca": pki["ca"][0], "cert": pki["client"][0], "key": pki["client"][1]}
    config = parse_config(
        {
            **_config(url, tls),
            "listen": {"tls": {"cert": pki["server"][0], "key": pki["server"][1], "client_ca": pki["ca"][0]}},
        }
    )
    ctx = _listen_ssl(config)
    assert ctx is not None
    server = await aiohttp_server(create_app(config), ssl=ctx)
    base = f"https://127.0.0.1:{server.port}"
    with_cert = ssl.create_default_context(cafile=pki["ca"][0])
    with_cert.load_cert_chain(*pki["client"])
    without = ssl.create_default_context(cafile=pki["ca"][0])
    async with aiohttp.ClientSession() as s:
        async with s.get(base + "/healthz", ssl=with_cert) as r:
            assert r.status == 200
        with pytest.raises(aiohttp.ClientError):
            async with s.get(base + "/healthz", ssl=without) as r:
                await r.read()
