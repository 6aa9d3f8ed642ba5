"""Deterministic models with the generate interfaces of three Triton backend families, served by
a real Triton server through PyTriton. Run by the PyTriton environment's python: `triton_models.py PORT`.

- `minimal`: the smallest generate model (text_input, optional max_tokens; text_output), one
  response per request;
- `ensemble`: the TensorRT-LLM ensemble's inputs and outputs; decoupled, streaming when its
  `stream` input is true; keeps a matched stop word in the text, as TensorRT-LLM does;
- `vllm_model`: the interface of Triton's vLLM backend: `sampling_parameters` as a JSON string,
  `stream`, `exclude_input_in_output` and the `return_*` switches, outputs only when asked;
- `failing`, `failing_decoupled`: the minimal interface, a model that raises on every request
  (Triton's answer then carries the model's traceback), plain and decoupled;
- `several`: the minimal interface, decoupled, answering every request with three responses;
- `hermes`: the vLLM backend's interface, a model that uses tools as Qwen's and Hermes' models
  write them: when its prompt lists tools (the chat template's `<tools>` block) and holds no tool
  result, it calls the first one in a `<tool_call>` block, its required string arguments the last
  word of the prompt's last user turn; after a tool result (`<tool_response ...>`) it answers in
  text with what the tool said; held to a JSON schema of calls (`structured_outputs`), it answers
  with the bare list of that call.

"Generation" is a fixed sentence built from the prompt, a word per token, so every answer can
be predicted by the test that asks for it (see `expected`).
"""

import json
import re
import sys

import numpy as np
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig


def tokens(prompt: str) -> list[str]:
    """What every model generates for `prompt`, one word per token."""
    words = ["Triton", "answers", *prompt.split()[:4], "and", "the", "gateway", "relays", "it", "word", "by", "word."]
    return [(" " if i else "") + w for i, w in enumerate(words)]


def _value(request: dict, name: str, default=None):  # type: ignore[no-untyped-def]
    if name not in request:
        return default
    v = np.asarray(request[name]).flatten()
    if v.size == 0:
        return default
    x = v[0]
    return x.decode() if isinstance(x, bytes) else x.item() if hasattr(x, "item") else x


def _words(request: dict, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    if name not in request:
        return []
    return [w.decode() if isinstance(w, bytes) else str(w) for w in np.asarray(request[name]).flatten() if w]


def _text(s: str) -> np.ndarray:
    return np.array([s.encode()], dtype=object)


def minimal(requests):  # type: ignore[no-untyped-def]
    out = []
    for r in requests:
        n = int(_value(r, "max_tokens", 8))
        out.append({"text_output": _text("".join(tokens(_value(r, "text_input", ""))[:n]))})
    return out


def failing(requests):  # type: ignore[no-untyped-def]
    raise ValueError("the model failed on purpose")


def several(requests):  # type: ignore[no-untyped-def]
    for r in requests:
        words = tokens(_value(r, "text_input", ""))[:3]
        for w in words:
            yield [{"text_output": _text(w)}]


def _cut(toks: list[str], stops: list[str], keep: bool) -> tuple[list[str], bool]:
    """Tokens up to the first stop string (kept in the text or not)."""
    text = ""
    for i, t in enumerate(toks):
        text += t
        for s in stops:
            at = text.find(s)
            if at >= 0:
                end = at + len(s) if keep else at
                cut = [*toks[:i], text[len("".join(toks[:i])) : end]]
                return [c for c in cut if c], True
    return toks, False


def ensemble(requests):  # type: ignore[no-untyped-def]
    for r in requests:
        prompt = _value(r, "text_input", "")
        n = int(_value(r, "max_tokens", 16))
        toks, _ = _cut(tokens(prompt)[:n], _words(r, "stop_words"), keep=True)
        lps = [-0.25 * (i % 4) if _value(r, "return_log_probs", False) else 0.0 for i in range(len(toks))]
        if _value(r, "stream", False):
            for i, t in enumerate(toks):
                yield [_ensemble_output(t, [lps[i]], sum(lps[: i + 1]))]
        else:
            text = "".join(toks)
            if not _value(r, "exclude_input_in_output", False):
                text = prompt + text
            yield [_ensemble_output(text, lps, sum(lps))]


def _ensemble_output(text: str, lps: list[float], cum: float) -> dict:  # type: ignore[type-arg]
    return {
        "text_output": _text(text),
        "cum_log_probs": np.array([cum], dtype=np.float32),
        "output_log_probs": np.array([lps], dtype=np.float32),
        "context_logits": np.array([0.0], dtype=np.float32),
        "generation_logits": np.array([0.0], dtype=np.float32),
        "batch_index": np.array([0], dtype=np.int32),
        "sequence_index": np.array([0], dtype=np.int32),
    }


def vllm_model(requests):  # type: ignore[no-untyped-def]
    for r in requests:
        prompt = _value(r, "text_input", "")
        sampling = json.loads(_value(r, "sampling_parameters", "{}") or "{}")
        n = int(sampling.get("max_tokens", 16))
        stops = sampling.get("stop") or []
        stops = [stops] if isinstance(stops, str) else stops
        toks, stopped = _cut(tokens(prompt)[:n], stops, keep=bool(sampling.get("include_stop_str_in_output")))
        finish = "stop" if stopped or len(toks) < n else "length"
        switches = ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")
        asked = {k: bool(_value(r, k, False)) for k in switches}
        n_in = len(prompt.split())
        if _value(r, "stream", False):
            if _value(r, "exclude_input_in_output", None) is False:
                raise ValueError("Streaming with exclude_input_in_output=False is not allowed.")
            for i, t in enumerate(toks):
                yield [_vllm_output(t, finish if i == len(toks) - 1 else None, n_in, 1, asked)]
        else:
            text = "".join(toks)
            if not _value(r, "exclude_input_in_output", False):
                text = prompt + text
            yield [_vllm_output(text, finish, n_in, len(toks), asked)]


def _vllm_output(text: str, finish: str | None, n_in: int, n_out: int, asked: dict) -> dict:  # type: ignore[type-arg]
    out = {"text_output": _text(text)}
    if asked["return_finish_reason"]:
        out["finish_reason"] = np.array([str(finish).encode()], dtype=object)
    if asked["return_num_input_tokens"]:
        out["num_input_tokens"] = np.array([n_in], dtype=np.uint32)
    if asked["return_num_output_tokens"]:
        out["num_output_tokens"] = np.array([n_out], dtype=np.uint32)
    return out


def _tools(prompt: str) -> list[dict]:  # type: ignore[type-arg]
    block = re.search(r"<tools>(.*?)</tools>", prompt, re.S)
    found = []
    for line in (block.group(1) if block else "").splitlines():
        try:
            tool = json.loads(line)
        except ValueError:
            continue
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            found.append(fn)
    return found


def _last_user_word(prompt: str) -> str:
    turns = re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", prompt, re.S)
    words = re.findall(r"[A-Za-z]+", turns[-1] if turns else prompt)
    return words[-1] if words else "somewhere"


def hermes_answer(prompt: str, sampling: dict) -> str:  # type: ignore[type-arg]
    """What the `hermes` model writes for a prompt (see the module's docstring)."""
    tools = _tools(prompt)
    said = re.findall(r"<tool_response[^>]*>\n(.*?)\n</tool_response>", prompt, re.S)
    if not tools or said:
        return f"The tool said: {said[-1]}." if said else "Hello from Triton."
    fn = tools[0]
    params = fn.get("parameters") or {}
    required = params.get("required") or list(params.get("properties") or {})[:1]
    args = {name: _last_user_word(prompt) for name in required}
    if sampling.get("structured_outputs") is not None:
        return json.dumps([{"name": fn["name"], "arguments": args}])
    return "<tool_call>\n" + json.dumps({"name": fn["name"], "arguments": args}) + "\n</tool_call>"


def hermes(requests):  # type: ignore[no-untyped-def]
    for r in requests:
        prompt = _value(r, "text_input", "")
        sampling = json.loads(_value(r, "sampling_parameters", "{}") or "{}")
        text = hermes_answer(prompt, sampling)
        asked = {
            k: bool(_value(r, k, False))
            for k in ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")
        }
        pieces = [text[i : i + 3] for i in range(0, len(text), 3)]
        if _value(r, "stream", False):
            for i, piece in enumerate(pieces):
                yield [_vllm_output(piece, "stop" if i == len(pieces) - 1 else None, len(prompt.split()), 1, asked)]
        else:
            yield [_vllm_output(text, "stop", len(prompt.split()), len(pieces), asked)]


def _bool(name: str) -> Tensor:
    return Tensor(name=name, dtype=np.bool_, shape=(1,), optional=True)


def main() -> None:
    port = int(sys.argv[1])
    config = TritonConfig(http_port=port, grpc_port=port + 1, metrics_port=port + 2, log_verbose=0)
    with Triton(config=config) as triton:
        triton.bind(
            model_name="minimal",
            infer_func=minimal,
            inputs=[
                Tensor(name="text_input", dtype=bytes, shape=(1,)),
                Tensor(name="max_tokens", dtype=np.int32, shape=(1,), optional=True),
            ],
            outputs=[Tensor(name="text_output", dtype=bytes, shape=(1,))],
            config=ModelConfig(batching=False),
        )
        triton.bind(
            model_name="ensemble",
            infer_func=ensemble,
            inputs=[
                Tensor(name="text_input", dtype=bytes, shape=(1,)),
                Tensor(name="max_tokens", dtype=np.int32, shape=(1,)),
                Tensor(name="bad_words", dtype=bytes, shape=(-1,), optional=True),
                Tensor(name="stop_words", dtype=bytes, shape=(-1,), optional=True),
                Tensor(name="end_id", dtype=np.int32, shape=(1,), optional=True),
                Tensor(name="pad_id", dtype=np.int32, shape=(1,), optional=True),
                Tensor(name="top_k", dtype=np.int32, shape=(1,), optional=True),
                Tensor(name="top_p", dtype=np.float32, shape=(1,), optional=True),
                Tensor(name="temperature", dtype=np.float32, shape=(1,), optional=True),
                Tensor(name="length_penalty", dtype=np.float32, shape=(1,), optional=True),
                Tensor(name="repetition_penalty", dtype=np.float32, shape=(1,), optional=True),
                Tensor(name="min_tokens", dtype=np.int32, shape=(1,), optional=True),
                Tensor(name="presence_penalty", dtype=np.float32, shape=(1,), optional=True),
                Tensor(name="frequency_penalty", dtype=np.float32, shape=(1,), optional=True),
                Tensor(name="random_seed", dtype=np.uint64, shape=(1,), optional=True),
                Tensor(name="beam_width", dtype=np.int32, shape=(1,), optional=True),
                _bool("return_log_probs"),
                _bool("return_context_logits"),
                _bool("return_generation_logits"),
                _bool("stream"),
                _bool("exclude_input_in_output"),
            ],
            outputs=[
                Tensor(name="text_output", dtype=bytes, shape=(-1,)),
                Tensor(name="cum_log_probs", dtype=np.float32, shape=(-1,)),
                Tensor(name="output_log_probs", dtype=np.float32, shape=(-1, -1)),
                Tensor(name="context_logits", dtype=np.float32, shape=(-1,)),
                Tensor(name="generation_logits", dtype=np.float32, shape=(-1,)),
                Tensor(name="batch_index", dtype=np.int32, shape=(1,)),
                Tensor(name="sequence_index", dtype=np.int32, shape=(1,)),
            ],
            config=ModelConfig(batching=False, decoupled=True),
        )
        vllm_inputs = [
            Tensor(name="text_input", dtype=bytes, shape=(1,)),
            _bool("stream"),
            Tensor(name="sampling_parameters", dtype=bytes, shape=(1,), optional=True),
            _bool("exclude_input_in_output"),
            _bool("return_finish_reason"),
            _bool("return_cumulative_logprob"),
            _bool("return_logprobs"),
            _bool("return_num_input_tokens"),
            _bool("return_num_output_tokens"),
        ]
        vllm_outputs = [
            Tensor(name="text_output", dtype=bytes, shape=(-1,)),
            Tensor(name="finish_reason", dtype=bytes, shape=(-1,)),
            Tensor(name="num_input_tokens", dtype=np.uint32, shape=(1,)),
            Tensor(name="num_output_tokens", dtype=np.uint32, shape=(-1,)),
        ]
        for name, func in (("vllm_model", vllm_model), ("hermes", hermes)):
            triton.bind(
                model_name=name,
                infer_func=func,
                inputs=vllm_inputs,
                outputs=vllm_outputs,
                config=ModelConfig(batching=False, decoupled=True),
            )
        for name, func, decoupled in (
            ("failing", failing, False),
            ("failing_decoupled", failing, True),
            ("several", several, True),
        ):
            triton.bind(
                model_name=name,
                infer_func=func,
                inputs=[Tensor(name="text_input", dtype=bytes, shape=(1,))],
                outputs=[Tensor(name="text_output", dtype=bytes, shape=(1,))],
                config=ModelConfig(batching=False, decoupled=decoupled),
            )
        triton.serve()


if __name__ == "__main__":
    main()
