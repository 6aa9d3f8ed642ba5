"""OpenAI's words, as data: its names for the neutral parameters, what clients send and what each
server takes (derived from the schema's marked fields, gateway.codec.fields), its finish reasons
both ways, and its error types. See docs/dialects/openai.md.
"""

from gateway.codec.errors import ErrorTable
from gateway.codec.fields import reading, writing
from gateway.codec.finish import FinishWords
from gateway.dialects.openai.schema import PUBLIC, VLLM, ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from gateway.neutral.errors import Kind
from gateway.neutral.types import Finish

CHAT_IN = reading(ChatCompletionRequest)
COMPLETION_IN = reading(CompletionRequest)
EMBEDDING_IN = reading(EmbeddingRequest)

PUBLIC_CHAT_OUT = writing(ChatCompletionRequest, PUBLIC)
PUBLIC_COMPLETION_OUT = writing(CompletionRequest, PUBLIC)
VLLM_CHAT_OUT = writing(ChatCompletionRequest, VLLM)
VLLM_COMPLETION_OUT = writing(CompletionRequest, VLLM)
EMBEDDING_OUT = writing(EmbeddingRequest, PUBLIC)


# The finish words OpenAI's clients know, for each canonical reason.
FINISH: dict[Finish, str] = {
    Finish.EOS: "stop",
    Finish.STOP_STRING: "stop",
    Finish.STOP_TOKEN: "stop",
    Finish.LENGTH: "length",
    Finish.TOOL_CALLS: "tool_calls",
    Finish.CONTENT_FILTER: "content_filter",
    Finish.ABORT: "stop",
    Finish.ERROR: "stop",
    Finish.UNKNOWN: "stop",
}

# The finish words OpenAI-style servers send (vLLM adds "abort" and "error").
FINISH_WORDS = FinishWords(
    {
        "stop": Finish.EOS,
        "length": Finish.LENGTH,
        "tool_calls": Finish.TOOL_CALLS,
        "function_call": Finish.TOOL_CALLS,
        "content_filter": Finish.CONTENT_FILTER,
        "abort": Finish.ABORT,
        "error": Finish.ERROR,
    }
)

# OpenAI's error `type` for each kind; the status is the error's own.
ERRORS: ErrorTable = {
    Kind.VALIDATION: (None, "invalid_request_error"),
    Kind.AUTH: (None, "invalid_request_error"),
    Kind.PERMISSION: (None, "invalid_request_error"),
    Kind.NOT_FOUND: (None, "invalid_request_error"),
    Kind.TOO_LARGE: (None, "invalid_request_error"),
    Kind.CLIENT_TIMEOUT: (None, "invalid_request_error"),
    Kind.UNSUPPORTED: (None, "invalid_request_error"),
    Kind.RATE_LIMIT: (None, "rate_limit_exceeded"),
    Kind.OVERLOADED: (None, "server_error"),
    Kind.UPSTREAM: (None, "server_error"),
    Kind.TIMEOUT: (None, "server_error"),
    Kind.UNAVAILABLE: (None, "server_error"),
    Kind.INTERNAL: (None, "server_error"),
}
