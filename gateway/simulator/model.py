"""A small deterministic fake model: the same request always gets the same answer.

It echoes the start of the prompt back inside a fixed sentence, honours max tokens, stop
strings (kept in the text with include_stop_str_in_output), n, tools and logprobs, and counts
tokens as whitespace-separated words, so every dialect's fields can be exercised without a GPU.
"""

import hashlib
import math
import zlib
from dataclasses import dataclass
from typing import Any

from gateway.neutral.types import Choice, EmbeddingResult, Finish, Request, Result, Task, Usage

VOCAB_SIZE = 32000


def token_id(token: str) -> int:
    return zlib.crc32(token.encode()) % VOCAB_SIZE


def prompt_text(req: Request) -> str:
    if req.messages is not None:
        return "\n".join(m.text() for m in req.messages)
    if req.prompt_ids is not None:
        ids = req.prompt_ids
        flat = ids[0] if ids and isinstance(ids[0], list) else ids
        return " ".join(f"t{t}" for t in flat)
    if isinstance(req.prompt, list):
        return req.prompt[0] if req.prompt else ""
    return req.prompt or ""


def count_prompt_tokens(req: Request) -> int:
    if req.prompt_ids is not None:
        ids = req.prompt_ids
        return len(ids[0]) if ids and isinstance(ids[0], list) else len(ids)
    return max(1, len(prompt_text(req).split()))


def _last_user(req: Request) -> str:
    for m in reversed(req.messages or ()):
        if m.role == "user":
            return m.text()
    return prompt_text(req)


@dataclass(slots=True)
class Generation:
    tokens: list[str]
    finish: Finish
    tool_calls: list[dict[str, Any]] | None = None

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def _tool_call(req: Request) -> list[dict[str, Any]] | None:
    tools = req.params.tools
    choice = req.params.tool_choice or "auto"
    if not tools or choice == "none" or req.messages is None:
        return None
    if choice == "auto" and req.messages[-1].role != "user":
        return None  # after a tool result, answer in text
    name = choice["function"]["name"] if isinstance(choice, dict) else tools[0]["function"]["name"]
    words = _last_user(req).split()[:3]
    args = '{"query": "' + " ".join(w.replace('"', "") for w in words) + '"}'
    call_id = "call_" + hashlib.sha1(_last_user(req).encode()).hexdigest()[:12]
    return [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}]


def generate(req: Request, index: int = 0) -> Generation:
    calls = _tool_call(req)
    if calls:
        return Generation([], Finish.TOOL_CALLS, calls)
    words = _last_user(req).split()[:6]
    echo = " ".join(words) if words else "nothing"
    sentence = f"Simulated answer {index}: you said {echo}. The gateway works end to end."
    tokens = [(" " if i else "") + w for i, w in enumerate(sentence.split(" "))]
    limit = req.params.max_tokens
    finish = Finish.EOS
    if isinstance(limit, int) and limit < len(tokens):
        tokens = tokens[:limit]
        finish = Finish.LENGTH
    stops = req.params.stop or ()
    if stops:
        text = "".join(tokens)
        hits = [(text.find(s), s) for s in stops if s and s in text]
        if hits:
            at, stop = min(hits)
            cut = at + len(stop) if req.params.include_stop_str_in_output else at
            kept, pos = [], 0
            for t in tokens:
                if pos + len(t) <= cut:
                    kept.append(t)
                    pos += len(t)
                else:
                    if cut > pos:
                        kept.append(t[: cut - pos])
                    break
            tokens, finish = kept, Finish.STOP_STRING
    return Generation(tokens, finish)


def logprob_entries(tokens: list[str], top: int) -> list[dict[str, Any]]:
    out = []
    for i, t in enumerate(tokens):
        lp = -0.05 * (i % 7)
        alts = [{"token": t, "logprob": lp, "bytes": list(t.encode())}]
        alts += [{"token": f" alt{k}", "logprob": lp - k, "bytes": list(f" alt{k}".encode())} for k in range(1, top)]
        out.append({"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": alts[:top]})
    return out


def complete(req: Request) -> Result:
    n = req.params.choices
    choices, completion = [], 0
    for i in range(n):
        g = generate(req, i)
        lp = logprob_entries(g.tokens, req.params.top_logprobs or 0) if req.params.logprobs else None
        choices.append(
            Choice(
                index=i,
                text=g.text,
                tool_calls=g.tool_calls,
                finish=g.finish,
                logprobs=lp,
                token_ids=[token_id(t) for t in g.tokens],
            )
        )
        completion += len(g.tokens) or (1 if g.tool_calls else 0)
    return Result(choices, Usage(count_prompt_tokens(req), completion), req.model)


def embed(req: Request) -> EmbeddingResult:
    dims = req.params.dimensions or 16
    vectors, tokens = [], 0
    for item in req.input or ():
        text = item if isinstance(item, str) else " ".join(map(str, item))
        tokens += max(1, len(text.split())) if isinstance(item, str) else len(item)
        digest = hashlib.sha256(text.encode()).digest()
        raw = [(digest[i % len(digest)] - 127.5) / 127.5 for i in range(dims)]
        norm = math.sqrt(sum(x * x for x in raw)) or 1.0
        vectors.append([round(x / norm, 6) for x in raw])
    assert req.task is Task.EMBEDDING
    return EmbeddingResult(vectors, Usage(tokens, 0), req.model)
