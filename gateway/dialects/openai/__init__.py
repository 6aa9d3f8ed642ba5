"""The OpenAI dialect: /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models."""

from gateway.codec.contract import Dialect
from gateway.dialects.openai.inbound import OpenAIInbound
from gateway.dialects.openai.outbound import OpenAIOutbound

DIALECT = Dialect("openai", OpenAIInbound(), OpenAIOutbound())
