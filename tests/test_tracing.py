"""OpenTelemetry traces: what reaches an OTLP/HTTP collector (a local receiver decoding the
protobuf bodies with opentelemetry-proto), what reaches the backend (`traceparent`), and that a
gateway without `tracing:` makes no provider or exporter (and imports no OpenTelemetry at all)."""

import asyncio
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto
from opentelemetry.proto.trace.v1.trace_pb2 import Status as StatusProto

from gateway import jsonutil
from gateway.config import ConfigError, parse_config
from gateway.proxy.services import SERVICES
from tests.conftest import one_route
from tests.support import FakeUpstream, Recorded, json_reply, sse_json, sse_reply, start_workers

ROOT = Path(__file__).resolve().parent.parent
# Words that must never reach the collector: the prompt, and the backend's completion.
PROMPT = "zanzibar-private-prompt"
COMPLETION = ["quokka", "-secret", "-answer"]
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@dataclass
class Got:
    """One exported span, decoded."""

    name: str
    kind: int
    trace_id: str
    span_id: str
    parent: str
    attrs: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status: int
    resource: dict[str, Any]

    @property
    def error(self) -> bool:
        return self.status == StatusProto.STATUS_CODE_ERROR


@dataclass
class Collector:
    """An OTLP/HTTP traces receiver on loopback: keeps every export request it is sent."""

    url: str = ""
    bodies: list[bytes] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        return app

    async def _export(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        self.bodies.append(await request.read())
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    def spans(self) -> list[Got]:
        out = []
        for body in self.bodies:
            req = ExportTraceServiceRequest()
            req.ParseFromString(body)
            for rs in req.resource_spans:
                resource = {a.key: _value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        out.append(
                            Got(
                                s.name,
                                s.kind,
                                s.trace_id.hex(),
                                s.span_id.hex(),
                                s.parent_span_id.hex(),
                                {a.key: _value(a.value) for a in s.attributes},
                                [(e.name, {a.key: _value(a.value) for a in e.attributes}) for e in s.events],
                                s.status.code,
                                resource,
                            )
                        )
        return out

    def servers(self) -> list[Got]:
        return [s for s in self.spans() if s.kind == SpanProto.SPAN_KIND_SERVER]

    def clients(self) -> list[Got]:
        return [s for s in self.spans() if s.kind == SpanProto.SPAN_KIND_CLIENT]


@pytest.fixture
async def collector(aiohttp_server: Any) -> Collector:
    c = Collector()
    server = await aiohttp_server(c.app())
    c.url = str(server.make_url("/v1/traces"))
    return c


def traced(config: dict[str, Any], collector: Collector, **tracing: Any) -> dict[str, Any]:
    return {**config, "tracing": {"otlp_endpoint": collector.url, **tracing}}


async def flush(gw: Any) -> None:
    tracing = gw.app[SERVICES].tracing
    assert tracing is not None
    await tracing.flush()


async def settled(gw: Any, collector: Collector, servers: int) -> None:
    """Flush until `servers` server spans have arrived (a handler that a client left ends a
    moment after the client saw its last byte)."""
    for _ in range(100):
        await flush(gw)
        if len(collector.servers()) >= servers:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{len(collector.servers())} server spans arrived, not {servers}")


def chat_answer(text: str) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


def chat_chunks(words: list[str]) -> list[bytes]:
    head = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    frames = [
        head + b'[{"index":0,"delta":{"content":%b},"finish_reason":null}]}\n\n' % jsonutil.dumps(w) for w in words
    ]
    frames.append(head + b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
    frames.append(head + b'[],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":9}}\n\n' % len(words))
    frames.append(b"data: [DONE]\n\n")
    return frames


def chat(stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "stream": stream, **extra}


def header(rec: Recorded, name: str) -> str | None:
    return next((v for k, v in rec.headers.items() if k.lower() == name), None)


def context_of(rec: Recorded) -> tuple[str, str, bool]:
    """The trace id, parent span id and sampled flag of the traceparent a backend got."""
    version, trace_id, span_id, flags = (header(rec, "traceparent") or "").split("-")
    assert version == "00"
    return trace_id, span_id, bool(int(flags, 16) & 1)


def assert_no_content(collector: Collector) -> None:
    raw = b"".join(collector.bodies)
    assert collector.bodies
    for text in [PROMPT, *COMPLETION, "".join(COMPLETION)]:
        assert text.encode() not in raw


# ---- spans and their attributes ----------------------------------------------------------------


async def test_a_request_gives_a_server_span_and_a_client_span_with_genai_attributes(
    upstream: FakeUpstream, make_gateway: Any, collector: Collector
) -> None:
    upstream.reply = json_reply(chat_answer("".join(COMPLETION)))
    # A translated route: a same-wire answer goes to the client as it came, its finish reasons unread.
    config = one_route("openai", "databricks", upstream.url, model="m")
    gw = await make_gateway(traced(config, collector, service_name="gw-test"))
    resp = await gw.post("/v1/chat/completions", json=chat(max_tokens=7, temperature=0.5, seed=11))
    assert resp.status == 200
    await gw.close()  # the app's stop exports what is queued

    (server,) = collector.servers()
    (client,) = collector.clients()
    assert server.resource["service.name"] == client.resource["service.name"] == "gw-test"
    assert server.name == "chat m" and client.name == "chat m"
    assert not server.parent  # no traceparent came: the trace begins here
    assert client.trace_id == server.trace_id and client.parent == server.span_id
    for span in (server, client):
        a = span.attrs
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "databricks"
        assert a["gen_ai.request.model"] == "m"
        assert a["gen_ai.request.max_tokens"] == 7
        assert a["gen_ai.request.temperature"] == 0.5
        assert a["gen_ai.usage.input_tokens"] == 5
        assert a["gen_ai.usage.output_tokens"] == 3
        assert a["gen_ai.response.finish_reasons"] == ["length"]
        assert a["http.response.status_code"] == 200
        assert "gen_ai.request.stream" not in a
        assert not span.error
    # The client asked for a seed; Databricks takes none, so the upstream request had none.
    assert server.attrs["gen_ai.request.seed"] == 11 and "gen_ai.request.seed" not in client.attrs
    assert server.attrs["http.request.method"] == "POST"
    assert server.attrs["http.route"] == "/v1/chat/completions"
    assert server.attrs["gateway.route"] == "r" and server.attrs["gateway.backend"] == "up"
    assert server.attrs["gateway.inbound"] == "openai"
    assert server.attrs["gateway.request_id"] == resp.headers["X-Request-Id"]
    assert client.attrs["server.address"] == "127.0.0.1" and client.attrs["gateway.replica"] == 0
    assert client.attrs["gen_ai.response.model"] == "m"
    # The backend got the client span's context, and no other trace header.
    assert context_of(upstream.last) == (client.trace_id, client.span_id, True)
    assert header(upstream.last, "tracestate") is None
    assert_no_content(collector)


async def test_the_clients_traceparent_is_the_parent_and_reaches_the_backend(
    upstream: FakeUpstream, make_gateway: Any, collector: Collector
) -> None:
    upstream.reply = json_reply(chat_answer("ok"))
    # Nothing that begins here is sampled; a client's sampled trace is kept all the same.
    gw = await make_gateway(traced(one_route("openai", "openai", upstream.url), collector, sample_ratio=0))
    given = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "tracestate": "vendor=opaque"}
    assert (await gw.post("/v1/chat/completions", json=chat(), headers=given)).status == 200
    sampled = upstream.last
    assert (await gw.post("/v1/chat/completions", json=chat())).status == 200
    unsampled = upstream.last
    await flush(gw)

    (server,) = collector.servers()
    (client,) = collector.clients()
    assert server.trace_id == CLIENT_TRACE and server.parent == CLIENT_SPAN
    assert client.parent == server.span_id
    assert context_of(sampled) == (CLIENT_TRACE, client.span_id, True)
    assert header(sampled, "tracestate") == "vendor=opaque"
    # Not sampled: no span is exported, but the backend still gets the trace context.
    trace_id, _, is_sampled = context_of(unsampled)
    assert trace_id != CLIENT_TRACE and not is_sampled


async def test_a_stream_has_the_first_token_event_and_ends_with_the_stream(
    upstream: FakeUpstream, make_gateway: Any, collector: Collector
) -> None:
    upstream.reply = sse_reply(chat_chunks(COMPLETION))
    gw = await make_gateway(traced(one_route("openai", "openai", upstream.url), collector))
    resp = await gw.post("/v1/chat/completions", json=chat(stream=True))
    assert resp.status == 200
    assert sse_json(await resp.read())[-1] == "[DONE]"
    await flush(gw)

    (server,) = collector.servers()
    (client,) = collector.clients()
    for span in (server, client):
        assert span.attrs["gen_ai.request.stream"] is True
        assert span.attrs["gen_ai.usage.output_tokens"] == 3
        assert span.attrs["gen_ai.response.finish_reasons"] == ["stop"]
        (event,) = [e for e in span.events if e[0] == "gen_ai.first_token"]
        assert event[1]["gen_ai.response.time_to_first_chunk"] > 0
        assert span.attrs["gen_ai.response.time_to_first_chunk"] > 0
        assert not span.error
    assert "gateway.cancelled" not in client.attrs
    assert_no_content(collector)


async def test_a_fanned_out_request_has_a_client_span_per_upstream_request(
    upstream: FakeUpstream, make_gateway: Any, collector: Collector
) -> None:
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        body = {"generated_text": "".join(COMPLETION), "details": {"finish_reason": "length", "generated_tokens": 2}}
        return web.json_response(body)

    upstream.reply = reply
    gw = await make_gateway(traced(one_route("openai", "tgi", upstream.url), collector))
    body = {"model": "m", "prompt": PROMPT, "n": 3, "max_tokens": 2, "seed": 7}
    resp = await gw.post("/v1/completions", json=body)
    assert resp.status == 200
    await flush(gw)

    (server,) = collector.servers()
    clients = collector.clients()
    assert len(clients) == 3 == len(upstream.requests)
    assert server.name == "text_completion m"
    assert server.attrs["gen_ai.request.choice.count"] == 3
    assert server.attrs["gen_ai.response.finish_reasons"] == ["length"] * 3
    assert server.attrs["gen_ai.provider.name"] == "tgi"
    for c in clients:
        assert c.parent == server.span_id and c.trace_id == server.trace_id
        assert c.attrs["gen_ai.operation.name"] == "text_completion"
        assert c.attrs["gen_ai.usage.output_tokens"] == 2
        assert c.attrs["gen_ai.response.finish_reasons"] == ["length"]
        assert "gen_ai.request.choice.count" not in c.attrs  # each branch makes one choice
    assert sorted(c.attrs["gen_ai.request.seed"] for c in clients) == [7, 8, 9]
    # Each upstream request carries its own branch's span.
    sent = sorted(context_of(r) for r in upstream.requests)
    assert sent == sorted((c.trace_id, c.span_id, True) for c in clients)
    assert_no_content(collector)


async def test_a_fanned_out_stream_to_a_simulated_backend(make_gateway: Any, collector: Collector) -> None:
    config = {
        "backends": {"sim": {"dialect": "tgi", "simulate": True, "model": "sim-model"}},
        "routes": [{"name": "r", "dialect": "openai", "backend": "sim"}],
    }
    gw = await make_gateway(traced(config, collector))
    body = {"prompt": ["a", "b"], "max_tokens": 3, "stream": True, "model": "x"}
    resp = await gw.post("/v1/completions", json=body)
    assert resp.status == 200
    await resp.read()
    await flush(gw)

    (server,) = collector.servers()
    clients = collector.clients()
    assert len(clients) == 2
    assert {c.name for c in clients} == {"text_completion sim-model"}
    assert len(server.attrs["gen_ai.response.finish_reasons"]) == 2
    for span in (server, *clients):
        assert [e for e in span.events if e[0] == "gen_ai.first_token"]
    for c in clients:
        assert c.parent == server.span_id
        assert c.attrs["gen_ai.usage.output_tokens"] == 3


# ---- failures -------------------------------------------------------------------------------


async def test_a_backend_fault_mid_stream_is_an_error_on_both_spans(
    upstream: FakeUpstream, make_gateway: Any, collector: Collector
) -> None:
    async def reply(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chat_chunks(["x"])[0])
        assert request.transport is not None
        request.transport.close()  # broken off mid-stream
        return resp

    upstream.reply = reply
    gw = await make_gateway(traced(one_route("openai", "openai", upstream.url), collector))
    resp = await gw.post("/v1/chat/completions", json=chat(stream=True))
    assert resp.status == 200
    await resp.read()
    await flush(gw)

    (server,) = collector.servers()
    (client,) = collector.clients()
    for span in (server, client):
        assert span.error
        assert span.attrs["error.type"] == "midstream"
    assert server.attrs["http.response.status_code"] == 200


async def test_an_upstream_error_status_is_an_error_on_the_client_span(
    upstream: FakeUpstream, make_gateway: Any, collector: Collector
) -> None:
    upstream.reply = json_reply({"error": {"message": PROMPT, "type": "server_error"}}, status=500)
    gw = await make_gateway(traced(one_route("openai", "openai", upstream.url, retries=0), collector))
    resp = await gw.post("/v1/chat/completions", json=chat())
    assert resp.status == 500
    await flush(gw)

    (server,) = collector.servers()
    (client,) = collector.clients()
    assert client.error and client.attrs["error.type"] == "status_5xx"
    assert client.attrs["http.response.status_code"] == 500
    assert server.error and server.attrs["error.type"] == "status_5xx"
    assert server.attrs["http.response.status_code"] == 500
    assert_no_content(collector)  # the backend's error text is not recorded either


async def test_a_client_that_leaves_mid_stream_ends_the_spans(
    upstream: FakeUpstream, make_gateway: Any, collector: Collector
) -> None:
    upstream.reply = sse_reply(chat_chunks(["a"])[:1], hang=True, upstream=upstream)
    gw = await make_gateway(traced(one_route("openai", "openai", upstream.url), collector))
    resp = await gw.post("/v1/chat/completions", json=chat(stream=True))
    assert resp.status == 200
    await resp.content.readany()
    resp.close()
    await upstream.disconnected.wait()
    await settled(gw, collector, 1)

    (server,) = collector.servers()
    (client,) = collector.clients()
    assert server.attrs["gateway.disconnect"] == "streaming"
    assert server.attrs["http.response.status_code"] == 499
    assert not server.error  # a client that leaves is normal
    assert client.attrs["gateway.cancelled"] is True and not client.error


async def test_a_failover_is_an_event_on_one_client_span(aiohttp_server: Any, make_gateway: Any, collector: Collector):
    ups = []
    for reply in (json_reply({"error": {"message": "busy", "type": "x"}}, status=503), json_reply(chat_answer("ok"))):
        up = FakeUpstream(reply=reply)
        up.url = str((await aiohttp_server(up.app())).make_url("")).rstrip("/")
        ups.append(up)
    backend = {"dialect": "openai", "urls": [u.url for u in ups], "retry_backoff_s": 0, "eject_base_s": 60}
    config = {"backends": {"up": backend}, "routes": [{"name": "r", "dialect": "openai", "backend": "up"}]}
    gw = await make_gateway(traced(config, collector))
    for _ in range(2):  # round-robin: one of the two starts at the busy replica
        assert (await gw.post("/v1/chat/completions", json=chat())).status == 200
    await flush(gw)

    clients = collector.clients()
    assert len(clients) == 2 and len(collector.servers()) == 2
    (retried,) = [c for c in clients if c.events]
    assert retried.events == [
        ("gateway.retry", {"http.request.resend_count": 1, "gateway.replica": 0, "error.type": "status_5xx"})
    ]
    assert retried.attrs["http.request.resend_count"] == 1 and retried.attrs["gateway.replica"] == 1
    assert retried.attrs["http.response.status_code"] == 200 and not retried.error
    # Both attempts carried the same span's context.
    carried = (retried.trace_id, retried.span_id, True)
    assert [context_of(r) for u in ups for r in u.requests].count(carried) == 2


async def test_each_worker_process_exports_its_own_spans_and_flushes_them_on_stop(
    tmp_path: Path, unused_tcp_port: int, collector: Collector
) -> None:
    """`gateway serve --workers 2`: a provider per worker; what each has queued when it stops
    reaches the collector (the batch delay, 5 s by default, has not passed by then)."""
    config = tmp_path / "gw.yaml"
    config.write_text(
        "backends:\n  sim: {dialect: openai, simulate: true, model: sim-model}\n"
        "routes:\n  - {name: chat, dialect: openai, backend: sim}\n"
        f"tracing: {{otlp_endpoint: '{collector.url}', service_name: workers}}\n"
    )
    port = unused_tcp_port
    proc, _ = await start_workers(config, port, {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")})
    n = 8
    try:
        # A fresh connection per request, so the kernel spreads them over the workers.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
            for i in range(n):
                body = {"model": "sim-model", "messages": [{"role": "user", "content": PROMPT}], "stream": i % 2 == 0}
                async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as r:
                    assert r.status == 200
                    await r.read()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(proc.wait(), 30)
    assert code == 0
    servers = collector.servers()
    assert len(servers) == n and len(collector.clients()) == n
    assert {s.resource["service.name"] for s in servers} == {"workers"}
    pids = {s.resource["process.pid"] for s in servers}
    assert pids and proc.pid not in pids  # spans come from the workers, each with its own provider
    assert sum(1 for s in servers if s.attrs.get("gen_ai.request.stream")) == n // 2
    assert_no_content(collector)


# ---- off, and the configuration --------------------------------------------------------------


async def test_with_tracing_off_nothing_is_made_and_no_trace_header_is_sent(
    upstream: FakeUpstream, make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gateway.tracing

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("made with tracing off")

    monkeypatch.setattr(gateway.tracing, "TracerProvider", refuse)
    monkeypatch.setattr(gateway.tracing, "OTLPSpanExporter", refuse)
    upstream.reply = json_reply(chat_answer("ok"))
    gw = await make_gateway(one_route("openai", "openai", upstream.url))
    given = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
    assert (await gw.post("/v1/chat/completions", json=chat(), headers=given)).status == 200
    assert gw.app[SERVICES].tracing is None
    assert header(upstream.last, "traceparent") is None  # client headers are not forwarded


def test_with_tracing_off_opentelemetry_is_not_even_imported() -> None:
    code = (
        "import sys\n"
        "from gateway.app import create_app\n"
        "from gateway.configfile import embedded_default\n"
        "create_app(embedded_default())\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_tracing_config_is_checked() -> None:
    base = one_route("openai", "openai", "http://127.0.0.1:1")
    with pytest.raises(ConfigError) as e:
        parse_config({**base, "tracing": {"otlp_endpoint": "collector:4318", "sample_ratio": 1.5, "extra": 1}})
    lines = "\n".join(e.value.lines)
    assert "tracing.otlp_endpoint: not an http(s) URL" in lines
    assert "tracing.sample_ratio" in lines and "tracing.extra" in lines
    conf = parse_config({**base, "tracing": {"otlp_endpoint": "http://collector:4318"}}).tracing
    assert conf is not None
    assert (conf.otlp_endpoint, conf.sample_ratio, conf.service_name) == (
        "http://collector:4318/v1/traces",
        1.0,
        "llm-gateway",
    )
    given = parse_config({**base, "tracing": {"otlp_endpoint": "https://c.example/otlp/v1/traces"}}).tracing
    assert given is not None and given.otlp_endpoint == "https://c.example/otlp/v1/traces"
    assert parse_config(base).tracing is None
