"""OpenAI's names for the neutral parameters, as data: what clients send, what backends get.

The public API and vLLM-style servers (vLLM, SGLang, MindIE's OpenAI routes, LiteLLM) share the
names; vLLM-style servers take some more. A chat body's `max_completion_tokens` is the public
API's newer name for `max_tokens` (vLLM-style servers read `max_tokens`). See
docs/dialects/openai.md.
"""

from gateway.codec.wirenames import WireNames

# Fields chat and completion bodies share, in the order the API reference lists them.
_SHARED = ("frequency_penalty", "logit_bias", "max_tokens", "n", "presence_penalty", "seed", "stop")
_SAMPLING = ("temperature", "top_p", "user")
# The vLLM-style extensions.
VLLM_EXTRAS = (
    "top_k",
    "min_p",
    "repetition_penalty",
    "stop_token_ids",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "ignore_eos",
    "min_tokens",
)
_CHAT = ("tools", "tool_choice", "response_format", "parallel_tool_calls", "reasoning_effort")

# What clients send. `max_completion_tokens` comes first: it wins over `max_tokens`.
CHAT_IN = WireNames([("max_completion_tokens", "max_tokens")]).plus(
    *_SHARED, *_SAMPLING, *VLLM_EXTRAS, *_CHAT, "chat_template_kwargs", "top_logprobs"
)
COMPLETION_IN = WireNames.of(*_SHARED, *_SAMPLING, *VLLM_EXTRAS, "suffix")
EMBEDDING_IN = WireNames.of("dimensions", "user")

# What backends get. The public API: chat sends `max_completion_tokens`.
PUBLIC_CHAT_OUT = WireNames([("max_completion_tokens", "max_tokens")]).plus(*_SHARED, *_SAMPLING, *_CHAT)
PUBLIC_COMPLETION_OUT = WireNames.of(*_SHARED, *_SAMPLING, "echo", "suffix", "best_of")
VLLM_CHAT_OUT = WireNames.of(*_SHARED, *_SAMPLING, *_CHAT, *VLLM_EXTRAS, "chat_template_kwargs")
VLLM_COMPLETION_OUT = PUBLIC_COMPLETION_OUT.plus(*VLLM_EXTRAS)
EMBEDDING_OUT = WireNames.of("dimensions", "user")
