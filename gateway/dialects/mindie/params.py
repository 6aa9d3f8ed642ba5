"""MindIE's names for the neutral parameters, as data, for each of its request shapes.

The native routes (/infer, /infer_token) read TGI's `parameters` object with a few names of
their own; the vLLM-style /generate reads vLLM's sampling names at the top level; the OpenAI
routes read OpenAI's names with vLLM's extensions. See docs/dialects/mindie.md.
"""

from gateway.codec.wirenames import WireNames

# The vLLM-style /generate body (`prompt` and sampling fields at the top level).
VLLM_GENERATE_IN = WireNames.of(
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "stop_token_ids",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "ignore_eos",
    "max_tokens",
    "stop",
    "n",
    "best_of",
)

# Native `parameters` a backend gets as they are; temperature, top_p, typical_p and do_sample
# follow TGI's sampling rules (no temperature 0, no top_p of 1).
NATIVE_OUT = WireNames([("max_new_tokens", "max_tokens")]).plus(
    "top_k", "seed", "repetition_penalty", "watermark", "priority", "timeout"
)

# What only the OpenAI routes take: any of these sends a completion there instead of /infer.
OPENAI_ONLY = (
    "stop",
    "stop_token_ids",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "ignore_eos",
    "presence_penalty",
    "frequency_penalty",
    "n",
    "best_of",
    "logprobs",
    "top_logprobs",
    "response_format",
)
# The OpenAI routes' fields besides logprobs (written in OpenAI's per-task shape).
COMPLETIONS_OUT = WireNames.of(
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "repetition_penalty",
    *(n for n in OPENAI_ONLY if n not in ("logprobs", "top_logprobs")),
)
CHAT_OUT = COMPLETIONS_OUT.plus("tools", "tool_choice", "chat_template_kwargs")
