"""Engines produce answers for a route: the proxy engine asks a backend over HTTP.

An engine turns a neutral request into a `Result` or an `EventStream` of neutral events. The
proxy engine applies the parameter policy, has the outbound codec build the upstream call, sends
it (failing over between replicas on connect errors), and maps every transport fault to an
`UpstreamError` of the right class. It never writes to the client.
"""

import logging
import time
from typing import TYPE_CHECKING, Protocol

import aiohttp
from yarl import URL

from gateway import jsonutil
from gateway.adapters import tokenizer_for
from gateway.adapters.stops import StopStream, apply_stops
from gateway.adapters.token_ids import TokenIdStream, fill_token_ids
from gateway.core.errors import (
    GatewayError,
    InvalidRequest,
    Kind,
    UpstreamClass,
    UpstreamConnectError,
    UpstreamError,
    UpstreamTimeout,
    upstream_status_error,
)
from gateway.core.offload import OFFLOAD_BYTES, offload
from gateway.core.params import Fate, apply_policy
from gateway.core.routing import Backend, shown_url
from gateway.core.types import EmbeddingResult, Event, Request, Result
from gateway.dialects.base import StreamParser, UpstreamCall

if TYPE_CHECKING:
    from gateway.core.exchange import Exchange

log = logging.getLogger("gateway")
MAX_ERROR_BODY = 64 * 1024
# No client header reaches a backend but the request id: credentials belong to each side, and
# MindIE steers its scheduler by headers (req-id, req-type, d-target, is-recompute).


class EventStream(Protocol):
    async def next(self) -> list[Event] | None:
        """The next batch of events; None at the end. Raises GatewayError on a fault."""
        ...

    async def aclose(self) -> None: ...


class Engine(Protocol):
    async def complete(self, req: Request, ex: "Exchange") -> Result | EmbeddingResult: ...

    async def open_stream(self, req: Request, ex: "Exchange") -> EventStream: ...

    @property
    def passthrough_dialect(self) -> str | None:
        """The dialect whose bodies this engine can hand to clients as they are, if any."""
        ...


def _malformed(backend: Backend, what: str) -> UpstreamError:
    return UpstreamError(f"backend {backend.name!r} sent a malformed {what}", upstream_class=UpstreamClass.PROTOCOL)


class ProxyEngine:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.codec = backend.dialect.outbound
        conf = backend.conf
        # A stream may run for long; what must not run long is the wait for its next chunk.
        self._stream_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=conf.connect_timeout_s, sock_read=conf.timeout_s
        )
        self._whole_timeout = aiohttp.ClientTimeout(total=conf.timeout_s, sock_connect=conf.connect_timeout_s)
        self._urls: dict[str, URL] = {}

    def _url(self, base: str, path: str) -> URL:
        """Parsed once per replica and path: yarl's parse is a measurable part of a request."""
        key = base + path
        url = self._urls.get(key)
        if url is None:
            if len(self._urls) > 1024:  # paths carry model names; keep the cache bounded
                self._urls.clear()
            url = self._urls[key] = URL(key)
        return url

    @property
    def passthrough_dialect(self) -> str | None:
        return self.backend.conf.dialect

    @property
    def batch_prompts(self) -> bool:
        """Whether the backend takes a list of prompts in one request (core.fanout)."""
        return bool(getattr(self.codec, "batch_prompts", False))

    def emulates_n(self, req: Request) -> bool:
        """Whether n > 1 choices must come from one upstream request each (core.fanout)."""
        if req.inbound == self.backend.conf.dialect:
            return False
        return self.codec.fates(self.backend, req).get("n") is Fate.EMULATE

    async def _prepare(self, req: Request) -> tuple[UpstreamCall, list[str] | None]:
        """The upstream call, and the stop strings the gateway must enforce itself (if any)."""
        stops: list[str] | None = None
        if req.inbound != self.backend.conf.dialect:
            fates = dict(self.codec.fates(self.backend, req))
            if fates.get("stop") is Fate.EMULATE:
                # Whoever cuts at stop strings also decides whether the stop text stays.
                fates.setdefault("include_stop_str_in_output", Fate.EMULATE)
            req.dropped = apply_policy(req, fates, self.backend.name, self.backend.conf.dialect)
            wanted = req.params.get("stop")
            if fates.get("stop") is Fate.EMULATE and wanted:
                stops = [wanted] if isinstance(wanted, str) else list(wanted)
        # A large request may mean a long chat-template render or tokenizer run: off the event
        # loop, so one big prompt does not stall every other request.
        call = await offload(self._build, req) if req.body_bytes >= OFFLOAD_BYTES else self._build(req)
        call.headers.setdefault("X-Request-Id", req.request_id)
        return call, stops

    def _build(self, req: Request) -> UpstreamCall:
        try:
            return self.codec.build(req, self.backend)
        except jsonutil.JSONEncodeError:
            # orjson reads what it cannot write (nesting past 254 levels); the body is the client's.
            raise InvalidRequest(
                "The request body nests too deeply or holds a number out of range", code="invalid_json"
            ) from None

    async def _send(self, call: UpstreamCall, ex: "Exchange") -> aiohttp.ClientResponse:
        b = self.backend
        headers = {**b.headers, **call.headers}
        if call.body is not None:
            headers.setdefault("Content-Type", "application/json")
        timeout = self._stream_timeout if call.stream else self._whole_timeout
        last: Exception | None = None
        ex.upstream_start = time.perf_counter()
        session = b.client()
        for url in b.replicas():
            try:
                resp = await session.request(
                    call.method,
                    self._url(url, call.path),
                    data=call.body,
                    headers=headers,
                    timeout=timeout,
                    ssl=b.ssl_ctx if b.ssl_ctx is not None else True,
                    allow_redirects=False,
                )
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
                # No connection, so not a byte of the request left: the next replica may take it.
                log.warning("backend %s: cannot connect to %s: %s", b.name, shown_url(url), e)
                last = e
                continue
            except (TimeoutError, aiohttp.ServerTimeoutError):
                raise UpstreamTimeout(f"backend {b.name!r} did not answer within {b.conf.timeout_s:g}s") from None
            except aiohttp.ClientError as e:
                # The request may have reached the backend (a reset after it was written): sending
                # it again could start a second generation, so it is never resent. The cause (a TLS
                # alert, a reset) is for the operator's log, not the client.
                log.warning("backend %s: request to %s failed: %s", b.name, shown_url(url), e)
                raise UpstreamConnectError(f"backend {b.name!r} failed: {type(e).__name__}") from None
            if resp.status >= 300:
                try:
                    body = await resp.content.read(MAX_ERROR_BODY)
                except (TimeoutError, aiohttp.ClientError):
                    body = b""
                finally:
                    resp.release()
                raise upstream_status_error(resp.status, self.codec.error_message(resp.status, body), b.name)
            return resp
        # No replica took the connection: the service is down (MindIE, TGI, Triton, Databricks: 503).
        raise UpstreamConnectError(
            f"backend {b.name!r} is unreachable ({type(last).__name__ if last else 'no replicas'})",
            kind=Kind.UNAVAILABLE,
        )

    async def complete(self, req: Request, ex: "Exchange") -> Result | EmbeddingResult:
        call, stops = await self._prepare(req)
        try:
            resp = await self._send(call, ex)
            call.response_headers = resp.headers
            try:
                body = await resp.read()
            except (TimeoutError, aiohttp.ServerTimeoutError):
                raise UpstreamTimeout(
                    f"backend {self.backend.name!r} did not answer within {self.backend.conf.timeout_s:g}s"
                ) from None
            except aiohttp.ClientError:
                raise UpstreamError(
                    f"backend {self.backend.name!r} closed the connection mid-response",
                    upstream_class=UpstreamClass.PROTOCOL,
                ) from None
            finally:
                resp.release()
        finally:
            ex.upstream_done()
        try:
            result = self.codec.parse_result(call, body)
        except GatewayError:
            raise
        except (jsonutil.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, IndexError):
            raise _malformed(self.backend, "response") from None
        if call.passthrough and req.inbound == self.backend.conf.dialect:
            result.passthrough = body
        if stops and isinstance(result, Result):
            result = apply_stops(result, stops, bool(req.params.get("include_stop_str_in_output", False)))
        if self._fills_token_ids(req) and isinstance(result, Result):
            tok = tokenizer_for(self.backend)
            if len(body) >= OFFLOAD_BYTES:
                result = await offload(fill_token_ids, result, tok)
            else:
                result = fill_token_ids(result, tok)
        return result

    def _fills_token_ids(self, req: Request) -> bool:
        return req.wants_token_ids and bool(self.backend.conf.tokenizer) and req.inbound != self.backend.conf.dialect

    async def open_stream(self, req: Request, ex: "Exchange") -> EventStream:
        call, stops = await self._prepare(req)
        try:
            resp = await self._send(call, ex)
        except BaseException:
            ex.upstream_done()
            raise
        stream: EventStream = _ProxyStream(self.backend, resp, self.codec.stream_parser(call), ex)
        if stops:
            # Ending early closes the proxy stream, which cuts the connection and so the generation.
            include = bool(req.params.get("include_stop_str_in_output", False))
            stream = StopStream(stream, stops, include, n=int(req.params.get("n") or 1))
        if self._fills_token_ids(req):
            stream = TokenIdStream(stream, tokenizer_for(self.backend))
        return stream


class _ProxyStream:
    __slots__ = ("_backend", "_done", "_ex", "_parser", "_resp")

    def __init__(self, backend: Backend, resp: aiohttp.ClientResponse, parser: StreamParser, ex: "Exchange") -> None:
        self._backend = backend
        self._resp = resp
        self._parser = parser
        self._ex = ex
        self._done = False

    async def next(self) -> list[Event] | None:
        if self._done:
            return None
        content = self._resp.content
        try:
            while True:
                chunk = await content.readany()
                if not chunk:
                    self._done = True
                    self._ex.upstream_done()
                    return self._parser.close() or None
                events = self._parser.feed(chunk)
                if events:
                    return events
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise UpstreamTimeout(
                f"backend {self._backend.name!r} sent nothing for {self._backend.conf.timeout_s:g}s",
                upstream_class=UpstreamClass.MIDSTREAM,
            ) from None
        except aiohttp.ClientError:
            raise UpstreamError(
                f"backend {self._backend.name!r} broke off the stream", upstream_class=UpstreamClass.MIDSTREAM
            ) from None
        except GatewayError:
            raise
        except (jsonutil.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, IndexError):
            raise UpstreamError(
                f"backend {self._backend.name!r} sent a malformed stream event", upstream_class=UpstreamClass.MIDSTREAM
            ) from None

    async def aclose(self) -> None:
        if self._done:
            self._resp.release()
            return
        self._done = True
        self._ex.upstream_done()
        # close(), not release(): an unfinished upstream stream must be cut, so the backend stops.
        self._resp.close()
