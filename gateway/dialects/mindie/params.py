"""MindIE's names for the neutral parameters, for each of its request shapes, as derived from the
schema's marked fields (gateway.codec.fields).

The native routes (/infer, /infer_token) read TGI's `parameters` object with a few names of
their own; the vLLM-style /generate reads vLLM's sampling names at the top level; the OpenAI
routes read OpenAI's names with vLLM's extensions (the OpenAI dialect reads those bodies). See
docs/dialects/mindie.md.
"""

from gateway.codec.fields import reading, writing
from gateway.dialects.mindie.schema import (
    NATIVE,
    OPENAI_ROUTES,
    MindIEChatRequest,
    MindIECompletionRequest,
    NativeParameters,
    VllmGenerateRequest,
)

NATIVE_IN = reading(NativeParameters)
VLLM_GENERATE_IN = reading(VllmGenerateRequest)

# Temperature, top_p, typical_p and do_sample go by TGI's sampling rules too (no temperature 0).
NATIVE_OUT = writing(NativeParameters, NATIVE)
# The OpenAI routes' fields besides logprobs (written in OpenAI's per-task shape).
COMPLETIONS_OUT = writing(MindIECompletionRequest, OPENAI_ROUTES)
CHAT_OUT = writing(MindIEChatRequest, OPENAI_ROUTES)

# What only the OpenAI routes take: any of these sends a completion there instead of /infer.
OPENAI_ONLY = (*sorted(COMPLETIONS_OUT.carried - NATIVE_OUT.carried), "logprobs", "top_logprobs")
