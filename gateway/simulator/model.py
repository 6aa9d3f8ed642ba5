"""A small deterministic fake model: the same request always gets the same answer.

It echoes the start of the prompt back inside a fixed sentence, honours max tokens, stop
strings (kept in the text with include_stop_str_in_output), n, tools, response formats and
logprobs (gateway.simulator.tools says how it uses tools), and counts tokens as
whitespace-separated words, so every dialect's fields can be exercised without a GPU.
"""

import hashlib
import math
import re
import zlib
from dataclasses import dataclass
from typing import Any

from gateway.neutral.types import Choice, EmbeddingResult, Finish, Request, Result, Task, Usage
from gateway.simulator import tools

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
    stop: str | None = None  # the stop string it ended on

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def _pieces(text: str) -> list[str]:
    """Text as the tokens a model would send it in: a few characters at a time."""
    return _PIECE.findall(text)


_PIECE = re.compile(r"\s*\S{1,6}|\s+")


def _answer(req: Request, index: int, tool_parser: str | None) -> list[str]:
    """The tokens of a text answer: JSON when the answer is held to a schema, a call in the
    parser's format when a text prompt's tools ask for one, else the sentence."""
    last = _last_user(req)
    held = tools.held_answer(req, tools.last_word(tools.said(last)))
    if held is not None:
        return _pieces(held)
    result = None
    if req.messages is None and tool_parser is not None:
        written, result = tools.text_call(prompt_text(req), tool_parser)
        if written is not None:
            return _pieces(written)
    elif req.messages and req.messages[-1].role == "tool":
        result = req.messages[-1].text()
    if result is not None:
        sentence = f"Simulated answer {index}: the tool said {result}."
    else:
        words = last.split()[:6]
        echo = " ".join(words) if words else "nothing"
        sentence = f"Simulated answer {index}: you said {echo}. The gateway works end to end."
    return [(" " if i else "") + w for i, w in enumerate(sentence.split(" "))]


def generate(req: Request, index: int = 0, tool_parser: str | None = None) -> Generation:
    """The answer to one choice. `tool_parser`: the format the simulated server's model writes
    tool calls in, when its prompt shows tools (a server that carries only text)."""
    last = _last_user(req)
    tool = tools.chosen(req, last) if req.messages is not None else None
    if tool is not None:
        call_id = "call_" + hashlib.sha1(last.encode()).hexdigest()[:12]
        return Generation([], Finish.TOOL_CALLS, [tools.call(tool, tools.last_word(last), call_id)])
    tokens = _answer(req, index, tool_parser)
    limit = req.params.max_tokens
    finish = Finish.EOS
    if isinstance(limit, int) and limit < len(tokens):
        tokens = tokens[:limit]
        finish = Finish.LENGTH
    stops = req.params.stop or ()
    if stops:
        text = "".join(tokens)
        # The stop complete first, as a server checking after each token finds it.
        hits = [(text.find(s) + len(s), -len(s), s) for s in stops if s and s in text]
        if hits:
            end, _, stop = min(hits)
            at = end - len(stop)
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
            return Generation(kept, Finish.STOP_STRING, stop=stop)
    return Generation(tokens, finish)


def logprob_entries(tokens: list[str], top: int) -> list[dict[str, Any]]:
    out = []
    for i, t in enumerate(tokens):
        lp = -0.05 * (i % 7)
        alts = [{"token": t, "logprob": lp, "bytes": list(t.encode())}]
        alts += [{"token": f" alt{k}", "logprob": lp - k, "bytes": list(f" alt{k}".encode())} for k in range(1, top)]
        out.append({"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": alts[:top]})
    return out


def complete(req: Request, tool_parser: str | None = None) -> Result:
    n = req.params.choices
    choices, completion = [], 0
    for i in range(n):
        g = generate(req, i, tool_parser)
        lp = logprob_entries(g.tokens, req.params.top_logprobs or 0) if req.params.logprobs else None
        choices.append(
            Choice(
                index=i,
                text=g.text,
                tool_calls=g.tool_calls,
                finish=g.finish,
                stop=g.stop,
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
