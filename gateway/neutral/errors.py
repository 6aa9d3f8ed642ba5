"""The gateway's one error tree. Each error knows its kind and the status it stands for.

Inbound dialects turn these into their own error bodies (and may pick a different status for a
kind, as MindIE does with 422 for validation); nothing else builds client-facing errors.
"""

from enum import StrEnum

from gateway.redact import for_client, scrub

# What a client sees of a backend's own text at most.
CLIENT_TEXT_LIMIT = 512
_CUT = " […] "


def clip(text: str, limit: int = CLIENT_TEXT_LIMIT) -> str:
    """A backend's text cut to at most `limit` characters for a client: the start of its first
    line, then as much of its end as fits, `[…]` between. The end is what says what went wrong:
    a traceback (Triton's answer for a model that raised) ends with the exception's line. A
    text that fits is returned as it is."""
    if len(text) <= limit:
        return text
    text = text.strip()
    if len(text) <= limit:
        return text
    first = text.split("\n", 1)[0][: limit // 3]
    room = limit - len(first) - len(_CUT)
    tail = text[-room:]
    # Begin the end at a line's start when one is near, rather than inside a line.
    start = tail.find("\n", 0, room // 4)
    return first + _CUT + (tail[start + 1 :] if start >= 0 else tail)


def body_text(body: bytes) -> str:
    """A backend's error body that is no JSON, as text for a client (`clip`ped)."""
    return clip(body.decode("utf-8", "replace").strip()) or "(empty body)"


class Kind(StrEnum):
    VALIDATION = "validation"
    AUTH = "auth"
    PERMISSION = "permission"
    NOT_FOUND = "not_found"
    TOO_LARGE = "too_large"
    CLIENT_TIMEOUT = "client_timeout"  # the client was too slow sending its request
    UNSUPPORTED = "unsupported"  # a capability gap the gateway cannot bridge with this config
    RATE_LIMIT = "rate_limit"
    OVERLOADED = "overloaded"
    UPSTREAM = "upstream"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


class UpstreamClass(StrEnum):
    """What went wrong with a backend, one thing each (docs/upstream.md): the label values of
    gateway_upstream_errors_total{error}, the access line's upstream_error, a span's error.type.
    The gateway's own limits are none of these (its connections to a backend all in use is
    an overload, a 503)."""

    CONNECT = "connect"  # no connection could be made: nothing was sent
    TIMEOUT = "timeout"  # the answer's head, or a whole answer, did not come in time
    STATUS_4XX = "status_4xx"  # it turned the request away with a 4xx (Triton: a 200 saying so)
    STATUS_5XX = "status_5xx"  # it answered a 5xx
    CLOSED = "closed"  # the connection closed or was reset before the answer was whole
    PROTOCOL = "protocol"  # an answer the gateway cannot take: HTTP, framing, coding, size, dialect
    MIDSTREAM = "midstream"  # a stream whose head had come failed, whatever the cause


class GatewayError(Exception):
    status = 500
    kind = Kind.INTERNAL
    # A backend's own error body and its content type, for a client of the backend's wire to
    # get as it came.
    body: bytes | None = None
    body_type: str = "application/json"
    # When to ask again (a Retry-After value: seconds or an HTTP date), for overload answers.
    retry_after: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        if status is not None:
            self.status = status


class InvalidRequest(GatewayError):
    status = 400
    kind = Kind.VALIDATION


class Unauthorized(GatewayError):
    status = 401
    kind = Kind.AUTH


class NotFound(GatewayError):
    status = 404
    kind = Kind.NOT_FOUND


class PayloadTooLarge(GatewayError):
    status = 413
    kind = Kind.TOO_LARGE


class RequestTimeout(GatewayError):
    status = 408
    kind = Kind.CLIENT_TIMEOUT


class Unsupported(GatewayError):
    """The request needs something this route's backend cannot do as configured."""

    status = 400
    kind = Kind.UNSUPPORTED


class Overloaded(GatewayError):
    """The gateway is at one of its own limits: ask again shortly."""

    status = 503
    kind = Kind.OVERLOADED
    retry_after = "1"


class RateLimited(GatewayError):
    """A backend's queue is full, a request waited in it too long, or a client is sending as many
    bodies at once as it may."""

    status = 429
    kind = Kind.RATE_LIMIT
    retry_after = "1"


class Unavailable(GatewayError):
    """The gateway itself cannot serve now (it is shutting down)."""

    status = 503
    kind = Kind.UNAVAILABLE


class UpstreamError(GatewayError):
    """The backend failed. `upstream_class` labels the metric.

    The message often quotes the backend's own words, which may echo a credential: it is
    scrubbed and cut short (`clip`) here, once, so it is safe to show wherever it goes. `detail`
    is what the backend sent that tells more, for the log and never for the client.
    """

    status = 502
    kind = Kind.UPSTREAM
    upstream_class = UpstreamClass.PROTOCOL

    def __init__(
        self,
        message: str,
        *,
        upstream_class: UpstreamClass | None = None,
        status: int | None = None,
        kind: Kind | None = None,
        code: str | None = None,
        param: str | None = None,
        detail: str = "",
    ) -> None:
        super().__init__(for_client(clip(scrub(message))), status=status, code=code, param=param)
        if upstream_class is not None:
            self.upstream_class = upstream_class
        if kind is not None:
            self.kind = kind
        self.detail = detail


class UpstreamConnectError(UpstreamError):
    upstream_class = UpstreamClass.CONNECT


class UpstreamTimeout(UpstreamError):
    status = 504
    kind = Kind.TIMEOUT
    upstream_class = UpstreamClass.TIMEOUT


def relaying(err: UpstreamError, body: bytes, body_type: str = "application/json") -> UpstreamError:
    """`err` for a client of the backend's own wire, which gets the backend's `body` as it is
    (secrets hidden) instead of the gateway's words."""
    err.body = scrub(body.decode("utf-8", "replace")).encode()
    err.body_type = body_type
    return err


def upstream_status_error(
    status: int,
    message: str,
    backend: str,
    body: bytes | None = None,
    body_type: str = "application/json",
    retry_after: str | None = None,
) -> UpstreamError:
    """The error a backend's non-2xx answer is to the client, with the backend's Retry-After
    kept on a 429 or 503."""
    err = _status_error(status, message, backend, body, body_type)
    if retry_after and status in (429, 503):
        # The backend says when to ask again: the client hears it, in its own dialect's answer.
        err.retry_after = retry_after
    return err


def _status_error(status: int, message: str, backend: str, body: bytes | None, body_type: str) -> UpstreamError:
    """Map an upstream error status to what the client should see.

    Client-side faults the backend detected (bad parameters, unknown model, too long, rate
    limited) keep their status and reach the client; credentials the gateway holds for the
    backend are the operator's problem, so 401/403 become 502; 5xx keep the upstream's status.
    `body` is the backend's error body when the client speaks the backend's wire: it then gets
    that body as it is (secrets scrubbed), with the backend's status, for any of these but
    401/403 and redirects.
    """
    if body is not None and status >= 400 and status not in (401, 403):
        err = _status_error(status, message, backend, None, body_type)
        err.status = status
        return relaying(err, body, body_type)
    text = f"backend {backend!r} answered {status}: {message}"
    cls = UpstreamClass.STATUS_5XX if status >= 500 else UpstreamClass.STATUS_4XX
    if status in (400, 422):
        return UpstreamError(text, upstream_class=cls, status=400, kind=Kind.VALIDATION)
    if status == 404:
        return UpstreamError(text, upstream_class=cls, status=404, kind=Kind.NOT_FOUND)
    if status == 413:
        return UpstreamError(text, upstream_class=cls, status=413, kind=Kind.TOO_LARGE)
    if status == 429:
        return UpstreamError(text, upstream_class=cls, status=429, kind=Kind.RATE_LIMIT)
    if status in (408, 504):
        return UpstreamError(text, upstream_class=cls, status=504, kind=Kind.TIMEOUT)
    if status == 503:
        return UpstreamError(text, upstream_class=cls, status=503, kind=Kind.UNAVAILABLE)
    if status >= 500:
        return UpstreamError(text, upstream_class=cls, status=status, kind=Kind.UPSTREAM)
    if status == 304:
        # Not Modified answers a conditional request, and the gateway sends none.
        return UpstreamError(
            f"backend {backend!r} answered 304 Not Modified to a request that was not conditional",
            upstream_class=UpstreamClass.PROTOCOL,
        )
    if 300 <= status < 400:
        # Redirects are never followed: the request would carry the prompt and the backend's
        # credentials to wherever the backend points.
        return UpstreamError(
            f"backend {backend!r} answered with a redirect ({status}), which the gateway does not follow",
            upstream_class=UpstreamClass.PROTOCOL,
        )
    return UpstreamError(text, upstream_class=cls, status=502, kind=Kind.UPSTREAM)
