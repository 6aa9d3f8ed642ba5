"""The names Triton generate backends give the neutral parameters, as data, per backend family.

- trtllm: the TensorRT-LLM ensemble's input tensors, sent at the top level of the body;
- vllm: Triton's vLLM backend, whose sampling settings travel in `sampling_parameters`, a JSON
  string (request parameters cannot hold the stop list);
- mindie: MindIE's variant, with TGI-like names under `parameters`.
What clients send is read by one validated model (gateway.dialects.triton.schema) that knows
every family's spellings. See docs/dialects/triton.md.
"""

from gateway.codec.wirenames import WireNames

# The validated model's fields that are neutral parameters under the same name.
IN = WireNames.of(
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "typical_p",
    "seed",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "do_sample",
    "ignore_eos",
    "min_tokens",
    "skip_special_tokens",
    "include_stop_str_in_output",
    "stop_token_ids",
)

TRTLLM = WireNames.of(
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "beam_width",
    random_seed="seed",
    stop_words="stop",
    bad_words="bad_words",
)
VLLM_SAMPLING = WireNames.of(
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "stop",
    "stop_token_ids",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "ignore_eos",
    "min_tokens",
    "seed",
)
# Temperature, top_p, top_k and do_sample follow MindIE's range rules (see outbound.mindie_body).
MINDIE = WireNames([("max_new_tokens", "max_tokens")]).plus(
    "seed", "repetition_penalty", "typical_p", "watermark", "priority", "timeout"
)
