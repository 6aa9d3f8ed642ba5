"""TGI's names for the neutral parameters: the `parameters` object of /generate, as data.

MindIE's TGI-style and native routes use the same object (with `priority` and `timeout` of
their own). See docs/dialects/tgi.md.
"""

from gateway.codec.wirenames import WireNames

# What clients send (each dialect's schema decides which of these it accepts at all).
PARAMETERS_IN = WireNames.of(
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "do_sample",
    "seed",
    "repetition_penalty",
    "frequency_penalty",
    "watermark",
    "truncate",
    "priority",
    "timeout",
    "stop",
    "best_of",
    max_new_tokens="max_tokens",
)

# Sent as they are. Temperature, top_p, typical_p and do_sample are sent too, but by the rules in
# `sampling` (the servers reject temperature 0 and a top_p of 1).
PARAMETERS_OUT = WireNames([("max_new_tokens", "max_tokens")]).plus(
    "top_k", "repetition_penalty", "frequency_penalty", "seed", "watermark", "truncate", "best_of", "stop"
)
