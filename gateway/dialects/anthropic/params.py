"""Anthropic's names for the neutral parameters, as data. See docs/dialects/anthropic.md.

The plain fields of a Messages body; the rest take a shape of their own on this wire and are
read and written by hand: `metadata.user_id` (user), `tools` and `tool_choice` (its
`disable_parallel_tool_use` is parallel_tool_calls), `thinking` (the chat template's switch).
"""

from gateway.codec.wirenames import WireNames

# What clients send and backends get, in the order the API reference lists them.
MESSAGES = WireNames.of("max_tokens", "temperature", "top_k", "top_p", stop_sequences="stop")
# The parameters written by hand (the fate policy reads what a backend carries from both).
SHAPED = ("user", "tools", "tool_choice", "parallel_tool_calls")
