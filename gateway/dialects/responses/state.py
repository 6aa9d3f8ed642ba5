"""The Responses API's paths besides create: what is kept of a response (after a whole answer;
a stream keeps its own), and the paths that read it (retrieve, stream again, delete, list its
input items), cancel (which only background responses allow, and the gateway makes none), and
the input token count (the backend's tokenizer over its chat template). See
docs/dialects/responses.md.
"""

from typing import Any

from gateway import jsonutil
from gateway.adapters import tokenizer_for
from gateway.adapters.prompt import prompt_text
from gateway.codec.contract import Asked, Caller, GroupView, RenderContext, Reply
from gateway.codec.validation import load_object, validate
from gateway.dialects.responses import render, stored
from gateway.dialects.responses.items import conversation
from gateway.dialects.responses.params import split_tools
from gateway.dialects.responses.schema import InputTokensRequest
from gateway.neutral import params as neutral
from gateway.neutral.errors import InvalidRequest, NotFound
from gateway.neutral.types import Answer, Request, Result, Task

# The wire API of a create body (Request.wire).
WIRE = "openai.responses"
_MAX_ITEMS = 100


async def keep(req: Request, answer: Answer, ctx: RenderContext, caller: Caller) -> None:
    """After a whole answer: the response (the backend's own, on a pass-through) and its input."""
    if not stored.wanted(req.raw) or not isinstance(answer, Result):
        return
    if answer.passthrough is not None:
        try:
            response = jsonutil.loads(answer.passthrough)
        except jsonutil.JSONDecodeError:
            return
        if not isinstance(response, dict):
            return
    else:
        response = render.whole_response(answer, req, ctx)
    await stored.save(caller, response, stored.input_of(req))


def _unknown(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id", code="response_not_found")


async def _kept(asked: Asked, caller: Caller) -> stored.Kept:
    rid = asked.path["response_id"]
    kept = await stored.load(caller, rid)
    if kept is None:
        raise _unknown(rid)
    return kept


def _flag(asked: Asked, name: str) -> bool:
    return asked.query.get(name, "").lower() in ("true", "1")


def _int(asked: Asked, name: str, default: int | None, lo: int = 0, hi: int | None = None) -> int | None:
    value = asked.query.get(name)
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        n = lo - 1
    if n < lo or (hi is not None and n > hi):
        where = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise InvalidRequest(f"`{name}` must be an integer {where}", param=name, code="invalid_value")
    return n


async def retrieve(asked: Asked, group: GroupView, caller: Caller) -> Reply:
    """GET /v1/responses/{id}: the response; with `stream=true` its events again."""
    kept = await _kept(asked, caller)
    if _flag(asked, "stream"):
        after = _int(asked, "starting_after", None, lo=-1)
        return Reply(body=render.replay(kept.response, after), content_type=render.CONTENT_TYPE)
    return Reply(body=jsonutil.dumps(kept.response))


async def delete(asked: Asked, group: GroupView, caller: Caller) -> Reply:
    rid = asked.path["response_id"]
    if not await stored.remove(caller, rid):
        raise _unknown(rid)
    return Reply(body=jsonutil.dumps({"id": rid, "object": "response", "deleted": True}))


async def cancel(asked: Asked, group: GroupView, caller: Caller) -> Reply:
    await _kept(asked, caller)
    raise InvalidRequest(
        "Only responses created with background=true can be cancelled, and this gateway makes none",
        param="response_id",
        code="not_cancellable",
    )


def listed_item(rid: str, k: int, item: dict[str, Any]) -> dict[str, Any]:
    """An input item as the item list shows it: with an id, a message's content as parts."""
    out = dict(item)
    kind = out.setdefault("type", "message")
    if kind == "message":
        content = out.get("content")
        if isinstance(content, str):
            part = "output_text" if out.get("role") == "assistant" else "input_text"
            out["content"] = [{"type": part, "text": content}]
        out.setdefault("status", "completed")
    if not isinstance(out.get("id"), str):
        out["id"] = f"{'msg' if kind == 'message' else 'item'}_{rid.removeprefix('resp_')}{k:04x}"
    return out


async def input_items_list(asked: Asked, group: GroupView, caller: Caller) -> Reply:
    """GET /v1/responses/{id}/input_items: the conversation the response answered, a page."""
    kept = await _kept(asked, caller)
    rid = asked.path["response_id"]
    limit = _int(asked, "limit", 20, lo=1, hi=_MAX_ITEMS) or 20
    order = asked.query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("`order` must be asc or desc", param="order", code="invalid_value")
    items = [listed_item(rid, k, item) for k, item in enumerate(kept.input)]
    if order == "desc":
        items.reverse()
    after = asked.query.get("after")
    if after is not None:
        at = next((k for k, item in enumerate(items) if item["id"] == after), None)
        if at is None:
            raise InvalidRequest(f"No input item {after!r} in this response", param="after", code="invalid_value")
        items = items[at + 1 :]
    page = items[:limit]
    body = {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }
    return Reply(body=jsonutil.dumps(body))


async def input_tokens(asked: Asked, group: GroupView, caller: Caller) -> Reply:
    """POST /v1/responses/input_tokens: the input's tokens as the route's backend would count
    them (its chat template over the conversation and tools, then its tokenizer)."""
    data = load_object(asked.body)
    m = validate(InputTokensRequest, data)
    route = group.select(m.model)
    items = stored.input_items(data.get("input"))
    if m.previous_response_id:
        kept = await stored.load(caller, m.previous_response_id)
        if kept is None:
            raise NotFound(
                f"Previous response with id '{m.previous_response_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        items = [*kept.context(), *items]
    functions, _ = split_tools(data.get("tools") if isinstance(data.get("tools"), list) else None)
    req = Request(
        task=Task.CHAT,
        wire=WIRE,
        model=m.model,
        messages=conversation(m.instructions, items),
        params=neutral.make({"tools": functions} if functions else {}),
    )
    backend = route.backend
    count = tokenizer_for(backend).count_prompt(prompt_text(req, backend))
    return Reply(body=jsonutil.dumps({"object": "response.input_tokens", "input_tokens": count}))
