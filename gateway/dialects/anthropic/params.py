"""Anthropic's names for the neutral parameters, derived from the schema's marked fields
(gateway.codec.fields). See docs/dialects/anthropic.md.

The plain fields of a Messages body; the rest take a shape of their own on this wire and are
read and written by hand: `metadata.user_id` (user), `tools` and `tool_choice` (its
`disable_parallel_tool_use` is parallel_tool_calls), `output_config.format` (response_format),
`thinking` (the chat template's switch).
"""

from gateway.codec.fields import reading, writing
from gateway.dialects.anthropic.schema import MESSAGES as SURFACE
from gateway.dialects.anthropic.schema import MessagesRequest

# What clients send and backends get.
MESSAGES_IN = reading(MessagesRequest)
MESSAGES = writing(MessagesRequest, SURFACE)
# The parameters written by hand (the fate policy reads what a backend carries from both).
SHAPED = ("user", "tools", "tool_choice", "parallel_tool_calls", "response_format")
