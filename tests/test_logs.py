"""Access log lines, request-id round trips, and secrets that never reach any log record."""

import asyncio
import io
import json
import logging
import re
from pathlib import Path

from gateway import logs, redact
from tests.conftest import one_route
from tests.support import json_reply, raw_reply, sse_reply

FIX = Path(__file__).parent / "fixtures" / "openai"
CHAT_RESPONSE = (FIX / "chat_response.json").read_bytes()
STREAM_FRAMES = [f + b"\n\n" for f in (FIX / "chat_stream.sse").read_bytes().split(b"\n\n") if f.strip()]
PROMPT = "my very private prompt about tea"


def chat(stream: bool = False) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "stream": stream}


def forwarded_id(upstream) -> str:
    """The request id the backend received (header names compare case-insensitively)."""
    [value] = [v for k, v in upstream.last.headers.items() if k.lower() == "x-request-id"]
    return value


def access_records(caplog) -> list[dict]:
    return [r.access for r in caplog.records if r.name == "gateway.access"]


async def test_client_request_id_is_echoed_and_forwarded(upstream, make_gateway):
    upstream.reply = raw_reply(CHAT_RESPONSE)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    r = await gw.post("/v1/chat/completions", json=chat(), headers={"X-Request-Id": "client-id-42"})
    assert r.status == 200
    assert r.headers["X-Request-Id"] == "client-id-42"
    assert forwarded_id(upstream) == "client-id-42"


async def test_missing_request_id_is_generated_echoed_and_forwarded(upstream, make_gateway):
    upstream.reply = sse_reply(STREAM_FRAMES)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    r = await gw.post("/v1/chat/completions", json=chat(stream=True))
    assert r.status == 200
    await r.read()
    rid = r.headers["X-Request-Id"]
    assert re.fullmatch(r"[0-9a-f]{32}", rid)
    assert forwarded_id(upstream) == rid


async def test_unsafe_request_id_is_replaced(upstream, make_gateway):
    upstream.reply = raw_reply(CHAT_RESPONSE)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    r = await gw.post("/v1/chat/completions", json=chat(), headers={"X-Request-Id": "x" * 200})
    rid = r.headers["X-Request-Id"]
    assert re.fullmatch(r"[0-9a-f]{32}", rid)
    assert forwarded_id(upstream) == rid


async def test_request_id_on_error_answers(upstream, make_gateway):
    upstream.reply = json_reply({"error": {"message": "down"}}, status=503)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    r = await gw.post("/v1/chat/completions", json=chat(), headers={"X-Request-Id": "err-1"})
    assert r.status == 503
    assert r.headers["X-Request-Id"] == "err-1"


async def test_one_access_line_per_request_with_fields_and_no_content(upstream, make_gateway, caplog):
    caplog.set_level(logging.INFO)
    upstream.reply = sse_reply(STREAM_FRAMES)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    r = await gw.post("/v1/chat/completions", json=chat(stream=True), headers={"X-Request-Id": "abc"})
    body = await r.read()
    assert b"Hello" in body
    recs = access_records(caplog)
    assert len(recs) == 1
    a = recs[0]
    assert {k: a[k] for k in ("request_id", "route", "backend", "inbound", "outbound", "method", "path", "status")} == {
        "request_id": "abc",
        "route": "r",
        "backend": "up",
        "inbound": "openai",
        "outbound": "openai",
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": 200,
    }
    assert (a["prompt_tokens"], a["completion_tokens"]) == (9, 4)
    assert a["duration_ms"] > 0 and a["upstream_ms"] > 0 and a["ttft_ms"] > 0
    assert a["duration_ms"] >= a["ttft_ms"]
    assert a["upstream_error"] is None and a["disconnect"] is None
    assert PROMPT not in caplog.text and "Hello" not in caplog.text

    # The JSON form: one object per line, fields at the top level.
    rec = next(r for r in caplog.records if r.name == "gateway.access")
    line = logs.JSONFormatter().format(rec)
    assert "\n" not in line
    obj = json.loads(line)
    assert obj["logger"] == "gateway.access" and obj["level"] == "info"
    assert obj["request_id"] == "abc" and obj["status"] == 200 and obj["completion_tokens"] == 4
    # The text form: key=value pairs.
    assert "request_id=abc client=127.0.0.1 route=r backend=up" in rec.getMessage()


async def test_access_line_for_a_rejected_request(upstream, make_gateway, caplog):
    caplog.set_level(logging.INFO)
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    await gw.post("/v1/chat/completions", data=b"{oops")
    [a] = access_records(caplog)
    assert a["status"] == 400 and a["route"] is None and a["inbound"] == "openai"


async def test_secrets_never_reach_the_logs(upstream, make_gateway, caplog, monkeypatch):
    secret = "sk-backend-Zq81xVv0TOPSECRET"
    api_key = "gw-client-key-5521abcdef"
    monkeypatch.setenv("SECRET", secret)
    monkeypatch.setenv("GW_KEYS", api_key)
    caplog.set_level(logging.DEBUG)
    # A backend that echoes the credentials it got into its error message, as some do.
    upstream.reply = json_reply({"error": {"message": f"token Bearer {secret} rejected; x-api={secret}"}}, status=500)
    conf = one_route(
        "openai", "openai", upstream.url, headers={"Authorization": "Bearer ${SECRET}", "X-Api-Key": "${SECRET}"}
    )
    conf["auth"] = {"api_keys_env": "GW_KEYS"}
    conf["routes"].append({"name": "dbx", "dialect": "databricks", "backend": "up"})
    gw = await make_gateway(conf)
    good = {"Authorization": f"Bearer {api_key}"}
    r = await gw.post("/v1/chat/completions", json=chat(), headers=good)
    assert r.status == 500
    assert upstream.last.headers["Authorization"] == f"Bearer {secret}"  # the backend does get it
    r = await gw.post("/v1/chat/completions", json=chat(), headers={"Authorization": f"Bearer {api_key}x"})
    assert r.status == 401
    # A client that puts a secret in the path: the access line's path is scrubbed too.
    r = await gw.post(f"/serving-endpoints/{secret}/invocations", json={"prompt": "x"}, headers=good)
    assert r.status == 500
    # Something logging a secret outright (a traceback, a debug dump) is scrubbed as well.
    log = logging.getLogger("gateway")
    log.debug("upstream call headers %s", {"Authorization": f"Bearer {secret}", "X-Api-Key": secret})
    try:
        raise RuntimeError(f"failed with key {api_key}")
    except RuntimeError:
        log.exception("boom")
    logging.getLogger("aiohttp.client").warning("client saw %s", secret)

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JSONFormatter())
    for rec in caplog.records:
        handler.handle(rec)
    out = caplog.text + stream.getvalue()
    assert "upstream error (status_5xx)" in out  # the debug line is there, scrubbed
    assert "[REDACTED]" in out
    assert "boom" in out and "RuntimeError" in out
    for leaked in (secret, api_key, PROMPT):
        assert leaked not in out
    assert len(access_records(caplog)) == 3
    assert any(a["path"] == "/serving-endpoints/[REDACTED]/invocations" for a in access_records(caplog))


def test_redactor_hides_registered_values_and_bearer_tokens():
    redact.REDACT.add(["abcd1234secret", "xy"])
    assert redact.REDACT("key=abcd1234secret!") == "key=[REDACTED]!"
    assert redact.REDACT("xy stays: too short to be a secret") == "xy stays: too short to be a secret"
    assert redact.REDACT("Authorization: Bearer eyJhbGciOi.J9") == "Authorization: Bearer [REDACTED]"
    assert redact.secret_header_values({"Authorization": "Bearer tok123"}) == ["Bearer tok123", "tok123"]


def test_setup_writes_json_lines():
    buf = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        logs.setup("json", "info", stream=buf)
        logs.access_log({"request_id": "r1", "status": 200, "route": "chat"})
        logging.getLogger("gateway").debug("not shown at info")
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1
    obj = json.loads(lines[0])
    assert obj["request_id"] == "r1" and obj["status"] == 200 and obj["route"] == "chat"


async def test_access_line_names_the_client_and_the_key_never_the_key_itself(upstream, make_gateway, caplog):
    caplog.set_level(logging.INFO)
    upstream.reply = raw_reply(CHAT_RESPONSE)
    key = "gw-client-key-0042"
    conf = one_route("openai", "openai", upstream.url)
    conf["auth"] = {"api_keys": [key]}
    gw = await make_gateway(conf)
    # Without trusted proxies, X-Forwarded-For is a claim anyone can make: the peer is logged.
    r = await gw.post(
        "/v1/chat/completions", json=chat(), headers={"Authorization": f"Bearer {key}", "X-Forwarded-For": "6.6.6.6"}
    )
    assert r.status == 200
    [a] = access_records(caplog)
    assert a["client"] == "127.0.0.1"
    assert re.fullmatch(r"key-[0-9a-f]{10}", a["key"])
    assert key not in caplog.text


async def test_forwarded_for_is_believed_only_from_trusted_proxies(upstream, make_gateway, caplog):
    caplog.set_level(logging.INFO)
    upstream.reply = raw_reply(CHAT_RESPONSE)
    conf = one_route("openai", "openai", upstream.url)
    conf["listen"] = {"trusted_proxies": ["127.0.0.0/8", "10.0.0.0/8"]}
    gw = await make_gateway(conf)
    # client -> 10.1.2.3 (a trusted proxy) -> loopback (trusted) -> gateway; the leftmost hop is
    # what the client claims about itself and is not believed past the first untrusted address.
    xff = "1.1.1.1, 203.0.113.9, 10.1.2.3"
    await gw.post("/v1/chat/completions", json=chat(), headers={"X-Forwarded-For": xff})
    await gw.post("/v1/chat/completions", json=chat(), headers={"X-Forwarded-For": "not-an-ip, 10.9.9.9"})
    assert [a["client"] for a in access_records(caplog)] == ["203.0.113.9", "10.9.9.9"]


def test_trusted_proxies_must_be_addresses_or_blocks():
    from gateway.config import ConfigError, parse_config

    conf = one_route("openai", "openai", "http://x:1")
    conf["listen"] = {"trusted_proxies": ["10.0.0.0/8", "proxy.local"]}
    try:
        parse_config(conf)
    except ConfigError as e:
        assert e.lines == ["listen.trusted_proxies: not an IP address or CIDR block: 'proxy.local'"]
    else:
        raise AssertionError("accepted a host name as a trusted proxy")


async def test_setup_writes_access_lines_as_records_would_in_order():
    """Access lines go to the handler `setup` installs without becoming records, written once per
    turn of the event loop; they read as the formatter would write them, and stay before any
    record logged after them."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    fields = {
        "request_id": "r1",
        "client": "10.0.0.1",
        "key": None,
        "path": "/v1/x Bearer sk-abcdefgh123456",
        "status": 200,
    }
    disabled, logs.ACCESS.disabled = logs.ACCESS.disabled, False  # an earlier gateway may have turned it off
    try:
        for fmt in ("text", "json"):
            buf = io.StringIO()
            logs.setup(fmt, "info", stream=buf)
            logs.access_log(dict(fields))
            assert buf.getvalue() == ""  # held until the loop turns, or another record comes
            logging.getLogger("gateway").warning("after")
            logs.access_log(dict(fields))
            await asyncio.sleep(0)
            first, warning, second = buf.getvalue().splitlines()
            assert first.split(" ", 2)[2] == second.split(" ", 2)[2] and "after" in warning
            record = logging.makeLogRecord(
                {"name": "gateway.access", "levelno": logging.INFO, "levelname": "INFO", "msg": "%s", "args": None}
            )
            record.access = {**fields, "path": redact.REDACT(fields["path"])}
            record.msg = logs.access_text(record.access)
            expected = root.handlers[0].format(record)
            if fmt == "json":
                got, want = json.loads(first), json.loads(expected)
                assert got.pop("ts").endswith("Z") and want.pop("ts").endswith("Z")
                assert got == want and got["path"] == "/v1/x Bearer [REDACTED]"
            else:
                # The same line but for the time stamp, which comes first.
                assert first.split(" ", 2)[2] == expected.split(" ", 2)[2]
                assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO gateway.access request_id=r1 ", first)
    finally:
        logs.ACCESS.disabled = disabled
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])
