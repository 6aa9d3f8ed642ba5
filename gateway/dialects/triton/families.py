"""Each Triton model family's reading of its answers (`Reading`, gateway.dialects.triton.reading):
what TensorRT-LLM's, the vLLM backend's and MindIE's outputs say of the finish and the token
counts, how a stream's end is judged, and which fields change from one stream event to the next
(the holes of the stream's template) and how a run of them is folded."""

from typing import Any

from gateway.codec.finish import FinishWords
from gateway.codec.learning import ALWAYS, SEEN
from gateway.dialects.triton.reading import Reader, Reading, first_value, tensor_count
from gateway.neutral.errors import UpstreamClass, UpstreamError
from gateway.neutral.types import Finish

# The vLLM backend's words (vLLM's own: stop, length, abort) and MindIE's (TGI's and OpenAI's).
_VLLM_WORDS = FinishWords({"stop": Finish.EOS, "length": Finish.LENGTH, "abort": Finish.ABORT})
_MINDIE_WORDS = _VLLM_WORDS | FinishWords(
    {
        "eos_token": Finish.EOS,
        "eos": Finish.EOS,
        "stop_sequence": Finish.STOP_STRING,
        "max_tokens": Finish.LENGTH,
        "tool_calls": Finish.TOOL_CALLS,
        "invalid finishReason": Finish.UNKNOWN,
        "invalid flag": Finish.UNKNOWN,
    }
)


def _take_trtllm(reader: Reader, obj: dict[str, Any]) -> None:
    # TRT-LLM names no finish; its output_log_probs hold one value per generated token.
    if "output_log_probs" in obj:
        reader.completion_tokens = (reader.completion_tokens or 0) + tensor_count(obj["output_log_probs"])


def _take_vllm(reader: Reader, obj: dict[str, Any]) -> None:
    if "finish_reason" in obj:
        reader.saw_finish_field = True
        reason = _VLLM_WORDS.read(first_value(obj["finish_reason"]))
        if reason is not None:
            reader.finish = reason
            reader.fresh_finish = True
    n_in = first_value(obj.get("num_input_tokens"))
    if isinstance(n_in, int):
        reader.prompt_tokens = n_in
    n_out = first_value(obj.get("num_output_tokens"))
    if isinstance(n_out, int):
        reader.completion_tokens = (reader.completion_tokens or 0) + n_out


def _take_mindie(reader: Reader, obj: dict[str, Any]) -> None:
    details = obj.get("details")
    if isinstance(details, dict):
        reason = _MINDIE_WORDS.read(details.get("finish_reason"))
        if reason is not None:
            reader.finish = reason
            reader.fresh_finish = True
        gen = details.get("generated_tokens")
        if isinstance(gen, int):
            reader.completion_tokens = gen  # a running total in streams
        n_in = details.get("prompt_tokens")
        if isinstance(n_in, int):
            reader.prompt_tokens = n_in


def _end_trtllm(reader: Reader, stream: bool, full: str) -> None:
    """A TRT-LLM stream just ends: any end is a normal one."""


def _end_vllm(reader: Reader, stream: bool, full: str) -> None:
    if reader.saw_finish_field and reader.finish is None and stream:
        raise UpstreamError(
            "backend stream ended before a finish reason (truncated)", upstream_class=UpstreamClass.MIDSTREAM
        )


def _end_mindie(reader: Reader, stream: bool, full: str) -> None:
    st = reader.st
    if st.expect_final and reader.finish is None and stream:
        raise UpstreamError(
            "backend stream ended without its final event (truncated)", upstream_class=UpstreamClass.MIDSTREAM
        )
    if reader.finish is Finish.STOP_STRING and not full and not st.stops_requested:
        # MindIE ends aborted or failed generations this way; with no stop asked for and no
        # text there is nothing else it can mean.
        raise UpstreamError(
            "backend ended the generation with no output (stop_sequence without a stop)",
            upstream_class=UpstreamClass.MIDSTREAM if stream else UpstreamClass.PROTOCOL,
        )


def _fold_trtllm(reader: Reader, held: dict[str, list[Any]]) -> None:
    if "output_log_probs" in held:
        reader.completion_tokens = (reader.completion_tokens or 0) + tensor_count(held["output_log_probs"])


_INT = {int}


def _fold_vllm(reader: Reader, held: dict[str, list[Any]]) -> None:
    # As `_take_vllm` reads each event: the last input count stands, output counts add up.
    for n in reversed(held.get("num_input_tokens", ())):
        if isinstance(n := first_value(n), int):
            reader.prompt_tokens = n
            break
    outputs = held.get("num_output_tokens")
    if outputs:
        # The usual run: a plain number an event, added up without a Python step each.
        if set(map(type, outputs)) == _INT:
            reader.completion_tokens = (reader.completion_tokens or 0) + sum(outputs)
            return
        counted = [n for n in map(first_value, outputs) if isinstance(n, int)]
        if counted:
            reader.completion_tokens = (reader.completion_tokens or 0) + sum(counted)


def _fold_mindie(reader: Reader, held: dict[str, list[Any]]) -> None:
    # A running total: the last event's stands.
    for n in reversed(held.get("details.generated_tokens", ())):
        if isinstance(n, int):
            reader.completion_tokens = n
            return


# Log probabilities (one per token: a count), and what the ensemble may add beside them.
_TRTLLM_VARYING = {
    "output_log_probs": ALWAYS,
    "cum_log_probs": ALWAYS,
    "context_logits": SEEN,
    "generation_logits": SEEN,
    "sequence_id": SEEN,
}
TRTLLM_READING = Reading(_take_trtllm, _end_trtllm, _TRTLLM_VARYING, ("output_log_probs",), _fold_trtllm)
VLLM_READING = Reading(
    _take_vllm,
    _end_vllm,
    {"num_output_tokens": ALWAYS, "num_input_tokens": SEEN},
    ("num_input_tokens", "num_output_tokens"),
    _fold_vllm,
)
# MindIE's per-token timings and queue figures, and its running count of tokens.
_MINDIE_VARYING = {
    "details.generated_tokens": ALWAYS,
    "details.batch_size": SEEN,
    "details.queue_wait_time": SEEN,
    "prefill_time": SEEN,
    "decode_time": SEEN,
    "id": SEEN,
}
MINDIE_READING = Reading(_take_mindie, _end_mindie, _MINDIE_VARYING, ("details.generated_tokens",), _fold_mindie)
