"""Finish-reason vocabularies: every upstream word mapped to a canonical reason, and back.

Upstreams are read with one table holding both families (OpenAI's and TGI/MindIE's), because
MindIE versions mix them on the same route.
"""

from gateway.neutral.types import Finish

_FROM_WIRE: dict[str, Finish] = {
    "stop": Finish.EOS,
    "eos_token": Finish.EOS,
    "eos": Finish.EOS,
    "stop_sequence": Finish.STOP_STRING,
    "length": Finish.LENGTH,
    "max_tokens": Finish.LENGTH,
    "tool_calls": Finish.TOOL_CALLS,
    "function_call": Finish.TOOL_CALLS,
    "content_filter": Finish.CONTENT_FILTER,
    "abort": Finish.ABORT,
    "error": Finish.ERROR,
    "invalid finishReason": Finish.UNKNOWN,
    "invalid flag": Finish.UNKNOWN,
}


def parse_finish(value: object) -> Finish | None:
    """None for "not finished" (null, or vLLM's "None" string); UNKNOWN for unheard-of words."""
    if value is None or value == "None" or value == "":
        return None
    if not isinstance(value, str):
        return Finish.UNKNOWN
    return _FROM_WIRE.get(value, Finish.UNKNOWN)


def openai_finish(finish_reason: object, stop_reason: object = None) -> Finish | None:
    """An OpenAI-style finish, sharpened by vLLM's `stop_reason`: the stop string that matched
    (a string), the stop token (an integer), or nothing for the end-of-sequence token."""
    reason = parse_finish(finish_reason)
    if reason is Finish.EOS and stop_reason is not None:
        return Finish.STOP_TOKEN if isinstance(stop_reason, int) else Finish.STOP_STRING
    return reason


OPENAI: dict[Finish, str] = {
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

TGI: dict[Finish, str] = {
    Finish.EOS: "eos_token",
    Finish.STOP_STRING: "stop_sequence",
    Finish.STOP_TOKEN: "stop_sequence",
    Finish.LENGTH: "length",
    Finish.TOOL_CALLS: "eos_token",
    Finish.CONTENT_FILTER: "eos_token",
    Finish.ABORT: "stop_sequence",
    Finish.ERROR: "stop_sequence",
    Finish.UNKNOWN: "eos_token",
}
