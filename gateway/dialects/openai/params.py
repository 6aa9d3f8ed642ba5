"""OpenAI's names for the neutral parameters, what clients send and what each server takes, as
derived from the schema's marked fields (gateway.codec.fields). See docs/dialects/openai.md.
"""

from gateway.codec.fields import reading, writing
from gateway.dialects.openai.schema import PUBLIC, VLLM, ChatCompletionRequest, CompletionRequest, EmbeddingRequest

CHAT_IN = reading(ChatCompletionRequest)
COMPLETION_IN = reading(CompletionRequest)
EMBEDDING_IN = reading(EmbeddingRequest)

PUBLIC_CHAT_OUT = writing(ChatCompletionRequest, PUBLIC)
PUBLIC_COMPLETION_OUT = writing(CompletionRequest, PUBLIC)
VLLM_CHAT_OUT = writing(ChatCompletionRequest, VLLM)
VLLM_COMPLETION_OUT = writing(CompletionRequest, VLLM)
EMBEDDING_OUT = writing(EmbeddingRequest, PUBLIC)
