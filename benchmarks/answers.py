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
        text = whole_text(shape, obj)
        if text != answer.text:
            raise ValueError(f"the answer's text is {text!r}, not {answer.text!r}")
        return Expect(json.dumps(answer.text, ensure_ascii=False), 0)
    data = sse_data(body)
    want = answer.stream_text
    if shape in ("anthropic", "responses"):
        text, marker = named_stream(shape, data, body)
    elif shape == "openai":
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
    if shape in ("tgi", "mindie"):
        # The last token rides in the final event when both come in one read, as under load.
        return Expect(marker, len(data) - 1)
    if text != want:
        at = next((i for i, (x, y) in enumerate(zip(text, want, strict=False)) if x != y), min(len(text), len(want)))
        raise ValueError(f"the stream's tokens differ from the answer's at character {at}: {text[at : at + 40]!r}")
    return Expect(marker, len(data))


def whole_text(shape: str, obj: dict[str, Any]) -> str:
    """The text of a whole answer in the client's dialect."""
    if shape == "openai":
        return str(obj["choices"][0]["message"]["content"])
    if shape == "anthropic":
        if obj.get("stop_reason") is None:
            raise ValueError("the message has no stop_reason")
        return "".join(b["text"] for b in obj["content"] if b["type"] == "text")
    if shape == "responses":
        if obj.get("status") not in ("completed", "incomplete"):
            raise ValueError(f"the response's status is {obj.get('status')!r}")
        items = [i for i in obj["output"] if i["type"] == "message"]
        return "".join(c["text"] for i in items for c in i["content"] if c["type"] == "output_text")
    return str(obj["generated_text"])


def named_stream(shape: str, data: list[str], body: bytes) -> tuple[str, str]:
    """The text of a Messages or Responses stream, and the marker of its end; raises when it
    does not end as the API ends a stream."""
    events = [json.loads(d) for d in data]
    kinds = [e.get("type") for e in events]
    if shape == "anthropic":
        if not kinds or kinds[-1] != "message_stop" or "message_delta" not in kinds:
            raise ValueError(f"the stream does not end with message_delta and message_stop: {body[-300:]!r}")
        deltas = [e["delta"] for e in events if e.get("type") == "content_block_delta"]
        return "".join(d.get("text", "") for d in deltas if d.get("type") == "text_delta"), '"type":"message_stop"'
    if not kinds or kinds[-1] not in ("response.completed", "response.incomplete"):
        raise ValueError(f"the stream does not end with response.completed: {body[-300:]!r}")
    text = "".join(e["delta"] for e in events if e.get("type") == "response.output_text.delta")
    return text, kinds[-1]


async def _post(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    sent = {"Content-Type": "application/json", **(headers or {})}
    async with session.post(url, data=json.dumps(body), headers=sent) as r:
        return r.status, await r.read()


def check(
    url: str, shape: str, stream: bool, body: dict[str, Any], answer: stub.Answer, headers: dict[str, str] | None = None
) -> Expect:
    """One request, answered completely and rightly, before any load; raises ValueError."""

    async def go() -> tuple[int, bytes]:
        async with aiohttp.ClientSession() as session:
            return await _post(session, url, body, headers)

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
