"""What can go wrong in an upstream exchange, named for what the caller must decide next.

Before a connection exists nothing of the request has left (`ConnectFailed`, `ConnectTimeout`,
`PoolBusy`): another replica may take it, or the gateway itself is at its limit. After, a byte
of it may have reached the backend, which may be generating already, so the caller resends only
where the operator said that is harmless.

A fault's message says what happened in the gateway's own words, the backend as its subject
("closed the connection before answering"), so it may be shown to a client after the backend's
name; whatever the backend sent that tells more (a parser's complaint, a header's value) is in
`detail`, for the log only.
"""


class Fault(Exception):
    """An upstream exchange failed."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail

    def again(self) -> "Fault":
        """A fresh copy to raise: the one a connection keeps is never raised itself, so no
        traceback (and the frames in it, with their requests) hangs off the connection."""
        return type(self)(str(self), self.detail)


class ConnectFailed(Fault):
    """No connection: refused, unreachable, a name that does not resolve, a TLS handshake
    refused or a certificate that does not verify. Nothing was sent."""


class ConnectTimeout(Fault):
    """The connection (and its TLS handshake) was not made in time. Nothing was sent."""


class PoolBusy(Fault):
    """Every connection the backend may have at once (`max_connections`) stayed in use while
    the request waited for one: the gateway's own limit, not the backend's fault. Nothing was
    sent."""


class ReadTimeout(Fault, TimeoutError):
    """Nothing came in time: the answer's head, its whole body (a whole answer's deadline), or
    the next piece of a stream."""


class BadAnswer(Fault):
    """The answer cannot be read: a head that is not HTTP/1.1 or is larger than the client
    takes (a header line, the number of headers, the whole head), an upgrade to another
    protocol, a body whose framing or content coding is broken or is one the gateway does not
    decode. The backend has the request."""


class Broken(Fault):
    """The connection closed, or was reset, after the request went out and before the answer
    was whole."""


class Unsendable(Fault):
    """The request cannot be written as HTTP/1.1: a header name or value holds a line break
    (which would smuggle in a header or a request of its own). Nothing was sent."""
