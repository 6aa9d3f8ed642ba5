"""Databricks' names for the neutral parameters, as data. See docs/dialects/databricks.md.

Databricks spells its fields as OpenAI does; it takes fewer of them.
"""

from gateway.codec.wirenames import WireNames

_SHARED = ("temperature", "top_p", "top_k", "max_tokens", "stop", "n")
# Not in Databricks' reference, but sent by the OpenAI clients it recommends: read as hints.
_CLIENT_HINTS = ("seed", "presence_penalty", "frequency_penalty", "user")
_CHAT = ("tools", "tool_choice", "response_format", "top_logprobs")
_COMPLETION = ("echo", "suffix", "error_behavior")

CHAT_IN = WireNames.of(*_SHARED, *_CLIENT_HINTS, *_CHAT)
COMPLETION_IN = WireNames.of(*_SHARED, *_CLIENT_HINTS, "echo", "suffix")
EMBEDDING_IN = WireNames.of("instruction")

CHAT_OUT = WireNames.of("max_tokens", "temperature", "top_p", "top_k", "stop", "n", *_CHAT)
COMPLETION_OUT = WireNames.of("max_tokens", "temperature", "top_p", "top_k", "stop", "n", *_COMPLETION)
EMBEDDING_OUT = EMBEDDING_IN
