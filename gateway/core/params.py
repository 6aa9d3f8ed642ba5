"""The parameter policy: what happens to each neutral parameter on the way to a backend.

Every neutral parameter has one fate per outbound dialect (DESIGN.md §2):
  MAP      the backend takes it (perhaps under another name or in another form);
  EMULATE  an adapter in the gateway provides it (stop strings cut in the stream, n by fan-out);
  DROP     a sampling hint the backend has no equivalent for: dropped, and named in the
           X-Gateway-Dropped-Params response header;
  REFUSE   it changes what the client may rely on and cannot be carried: the request fails
           with a 4xx that says so.
An outbound codec lists the fates that differ from the defaults below.
"""

from collections.abc import Mapping
from enum import StrEnum

from gateway.core.errors import Unsupported
from gateway.core.types import Request


class Fate(StrEnum):
    MAP = "map"
    EMULATE = "emulate"
    DROP = "drop"
    REFUSE = "refuse"


# Hints: leaving them out changes sampling, not the shape of the answer the client relies on.
HINTS: frozenset[str] = frozenset(
    {
        "top_k",
        "min_p",
        "typical_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "do_sample",
        "watermark",
        "priority",
        "timeout",
        "seed",
        "user",
        "skip_special_tokens",
        "ignore_eos",
        "logit_bias",
        "chat_template_kwargs",
        "truncate",
        "metadata",
        "store",
        "service_tier",
        "parallel_tool_calls",
        "reasoning_effort",
    }
)

# Everything every dialect carries in some form; codecs need not list these.
UNIVERSAL: frozenset[str] = frozenset({"max_tokens", "temperature", "top_p"})

DROPPED_HEADER = "X-Gateway-Dropped-Params"


def default_fate(name: str) -> Fate:
    if name in UNIVERSAL:
        return Fate.MAP
    return Fate.DROP if name in HINTS else Fate.REFUSE


def apply_policy(req: Request, fates: Mapping[str, Fate], backend: str, dialect: str) -> list[str]:
    """Remove dropped parameters from `req.params`; return their names; raise for refused ones.

    A parameter set to its "off" value (None, False, an empty list) is never a reason to refuse
    or to name a drop: it is removed; but False stays where the backend maps it or the gateway
    emulates it, because there it can mean something (do_sample False is greedy decoding).
    """
    dropped: list[str] = []
    refused: list[str] = []
    for name in list(req.params):
        value = req.params[name]
        fate = fates.get(name) or default_fate(name)
        if value is None or value == [] or value == {} or (value is False and fate not in (Fate.MAP, Fate.EMULATE)):
            del req.params[name]
            continue
        if fate is Fate.DROP:
            del req.params[name]
            dropped.append(name)
        elif fate is Fate.REFUSE:
            refused.append(name)
    if refused:
        names = ", ".join(sorted(refused))
        raise Unsupported(
            f"backend {backend!r} ({dialect}) cannot honour: {names}; "
            "remove them from the request or route it to a backend that supports them",
            param=sorted(refused)[0],
            code="unsupported_parameter",
        )
    return sorted(dropped)
