"""What a complete, right answer is, in the shape each client gets it (openai chat, MindIE's
native, TGI's), checked once before a scenario is loaded; and the marker and event count every
answer under load must hold too (wrk's script looks for them in --quick).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from benchmarks import stub
from benchmarks.procs import SetupError


@dataclass
class Expect:
    """A checked answer: what every answer under load must hold too."""

    marker: str
    events: int


def sse_data(body: bytes) -> list[str]:
    return [line[5:].strip().decode() for line in body.splitlines() if line.startswith(b"data:")]


def check_answer(shape: str, stream: bool, status: int, body: bytes, answer: stub.Answer) -> Expect:
    """Is this the complete, right answer in the client's dialect? The marker that only a
    complete answer holds and its count of `data:` events, for wrk's check; raises ValueError."""
    if status != 200:
        raise ValueError(f"status {status}: {body[:300]!r}")
    if not stream:
        obj = json.loads(body)
        text = obj["choices"][0]["message"]["content"] if shape == "openai" else obj["generated_text"]
        if text != answer.text:
            raise ValueError(f"the answer's text is {text!r}, not {answer.text!r}")
        return Expect(json.dumps(answer.text), 0)
    data = sse_data(body)
    want = answer.stream_text
    if shape == "openai":
        if not data or data[-1] != "[DONE]":
            raise ValueError(f"the stream does not end with [DONE]: {body[-300:]!r}")
        chunks = [json.loads(d) for d in data[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        if not any(c["choices"] and c["choices"][0].get("finish_reason") for c in chunks):
            raise ValueError("no chunk has a finish_reason")
        marker = "data: [DONE]"
    else:
        events = [json.loads(d) for d in data]
        last = events[-1] if events else {}
        if last.get("generated_text") != want:
            raise ValueError(f"the last event does not hold the whole text: {body[-300:]!r}")
        if shape == "mindie" and not (last.get("details") or {}).get("finish_reason"):
            raise ValueError(f"the last event has no details.finish_reason: {body[-300:]!r}")
        # MindIE's last event carries its token's text only in generated_text (text null).
        text = "".join(e["token"]["text"] or "" for e in events)
        if shape == "mindie" and want.startswith(text):
            text = want
        marker = json.dumps(want[-40:])[1:]  # the end of generated_text and its closing quote
    if text != want:
        at = next((i for i, (x, y) in enumerate(zip(text, want, strict=False)) if x != y), min(len(text), len(want)))
        raise ValueError(f"the stream's tokens differ from the answer's at character {at}: {text[at : at + 40]!r}")
    return Expect(marker, len(data))


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with session.post(url, data=json.dumps(body), headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.read()


def check(url: str, shape: str, stream: bool, body: dict[str, Any], answer: stub.Answer) -> Expect:
    """One request, answered completely and rightly, before any load; raises ValueError."""

    async def go() -> tuple[int, bytes]:
        async with aiohttp.ClientSession() as session:
            return await _post(session, url, body)

    status, raw = asyncio.run(go())
    return check_answer(shape, stream, status, raw, answer)


# What a failed check raises, besides ValueError: a field missing or of the wrong type, or no answer.
CHECK_ERRORS = (ValueError, KeyError, IndexError, TypeError, aiohttp.ClientError)


def check_stub(port: int) -> None:
    """nginx answers each POST with the answer's own bytes (the 405 redirect trick works)."""

    async def go() -> None:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            for a in stub.ANSWERS.values():
                for path, want in ((a.whole_url_path, a.whole), (a.stream_url_path, a.stream)):
                    status, got = await _post(session, f"http://127.0.0.1:{port}{path}", {})
                    if status != 200 or got != want:
                        raise SetupError(f"the stub answers POST {path} with {status}, {len(got)} bytes")

    asyncio.run(go())
