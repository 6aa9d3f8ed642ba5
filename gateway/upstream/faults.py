"""What can go wrong in an upstream exchange, named for what the caller must decide next.

Before a connection exists nothing of the request has left (`ConnectFailed`, `ConnectTimeout`):
another replica may take it. After, a byte of it may have reached the backend, which may be
generating already, so the caller resends only where the operator said that is harmless.
"""


class Fault(Exception):
    """An upstream exchange failed. The message is for the log: it may quote the backend."""


class ConnectFailed(Fault):
    """No connection: refused, unreachable, a name that does not resolve, a TLS handshake
    refused or a certificate that does not verify. Nothing was sent."""


class ConnectTimeout(Fault):
    """The connection (and its TLS handshake) was not made in time. Nothing was sent."""


class ReadTimeout(Fault, TimeoutError):
    """Nothing came in time: the answer's head, its whole body (a whole answer's deadline), or
    the next piece of a stream."""


class BadAnswer(Fault):
    """The answer's head cannot be read as HTTP/1.1, is larger than the client takes (a header
    line, the number of headers, the whole head), or names a content coding it cannot decode.
    The backend has the request."""


class Broken(Fault):
    """The connection closed or failed before the answer ended, or the body cannot be read as
    its framing or content coding says."""


class Unsendable(Fault):
    """The request cannot be written as HTTP/1.1: a header name or value holds a line break
    (which would smuggle in a header or a request of its own). Nothing was sent."""
