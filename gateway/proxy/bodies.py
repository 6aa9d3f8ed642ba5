"""How much of a backend's answer the gateway reads, by what it reads it for.

Every read of a body is bounded (gateway.upstream's `Answer.read` and `Answer.prefix`): an
answer in many TCP segments is read to its end, and one larger than its bound is refused
unread, whatever its Content-Length said (a compressed body counts as it decodes).
"""

MAX_ERROR_BODY = 64 * 1024  # an error answer is read for its message; the rest is cut
MAX_INFO_BODY = 1024 * 1024  # a model list, a model's metadata, a health document
