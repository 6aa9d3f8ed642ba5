"""Databricks' names for the neutral parameters, what clients send and what its servers take, as
derived from the schema's marked fields (gateway.codec.fields). See docs/dialects/databricks.md.
"""

from gateway.codec.fields import reading, writing
from gateway.dialects.databricks.schema import SERVED, ChatRequest, CompletionRequest, EmbeddingRequest

CHAT_IN = reading(ChatRequest)
COMPLETION_IN = reading(CompletionRequest)
EMBEDDING_IN = reading(EmbeddingRequest)

CHAT_OUT = writing(ChatRequest, SERVED)
COMPLETION_OUT = writing(CompletionRequest, SERVED)
EMBEDDING_OUT = writing(EmbeddingRequest, SERVED)
