"""Anthropic's Messages API, both ways: POST /v1/messages (and its token count), /v1/models."""

from gateway.codec.contract import Demo, Dialect
from gateway.dialects.anthropic.inbound import AnthropicInbound
from gateway.dialects.anthropic.outbound import AnthropicOutbound

# It shares OpenAI's /v1/models, so the embedded default mounts it under a prefix of its own:
# ANTHROPIC_BASE_URL=http://127.0.0.1:8080/anthropic.
DIALECT = Dialect("anthropic", AnthropicInbound(), AnthropicOutbound(), Demo(prefix="/anthropic"))
