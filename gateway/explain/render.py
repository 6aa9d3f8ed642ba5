"""An explanation as text for a person, or as JSON for a program (its shape: docs/explain.md).

The JSON shape is stable: fields are only ever added. Bodies are given as text (every upstream
body the gateway writes is JSON, so UTF-8); `body_base64` instead in the unlikely case one is not.
"""

import base64
from typing import Any

from gateway import jsonutil
from gateway.explain.record import ClientError, Explanation, Upstream

SHAPE_VERSION = 1


def render_json(e: Explanation) -> bytes:
    return jsonutil.dumps(as_json(e))


def as_json(e: Explanation) -> dict[str, Any]:
    return {
        "version": SHAPE_VERSION,
        "route": e.route,
        "dialect": e.dialect,
        "path": e.path,
        "backend": {"name": e.backend, "dialect": e.backend_dialect, "model": e.model, "simulated": e.simulated},
        "request_id": e.request_id,
        "passthrough": e.passthrough,
        "parameters": [
            {"name": p.name, "value": p.value, "fate": p.fate, "wire": list(p.wire), "why": p.why} for p in e.params
        ],
        "stops": None if e.stops is None else {"strings": list(e.stops), "kept_in_output": e.include_stop},
        "fanout": {
            "requests": e.fanout.requests,
            "prompts": e.fanout.prompts,
            "choices": e.fanout.choices,
            "why": e.fanout.why,
        },
        "prompt": e.prompt,
        "upstream": [_upstream_json(u) for u in e.upstream],
        "response_headers": {"X-Gateway-Dropped-Params": e.dropped} if e.dropped else {},
        "error": None if e.error is None else _error_json(e.error),
        "notes": list(e.notes),
    }


def _body(body: bytes | None) -> dict[str, Any]:
    if body is None:
        return {"body": None}
    try:
        return {"body": body.decode()}
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(body).decode()}


def _upstream_json(u: Upstream) -> dict[str, Any]:
    return {
        "method": u.method,
        "url": u.url,
        "target": u.target,
        "proxy": u.proxy,
        "stream": u.stream,
        "headers": [list(h) for h in u.headers],
        **_body(u.body),
    }


def _error_json(err: ClientError) -> dict[str, Any]:
    return {"status": err.status, "content_type": err.content_type, **_body(err.body)}


def render_text(e: Explanation) -> str:
    out = [f"route {e.route} ({e.dialect} {e.path}) -> backend {e.backend} ({_backend(e)})"]
    out += [f"  note: {n}" for n in e.notes]
    if e.params:
        out.append("parameters:")
        width = max(len(p.name) for p in e.params)
        for p in e.params:
            out.append(f"  {p.name:<{width}}  {jsonutil.dumps_str(p.value)}  {p.fate}: {p.why}")
    if e.stops is not None:
        kept = "kept in" if e.include_stop else "cut from"
        strings = ", ".join(jsonutil.dumps_str(s) for s in e.stops)
        out.append(f"stop strings the gateway enforces: {strings} (the stop text is {kept} the output)")
    if e.fanout.requests > 1:
        out.append(f"fan-out: {e.fanout.requests} upstream requests ({e.fanout.why})")
    if e.prompt is not None:
        out.append("chat template's prompt:")
        out += [f"  | {line}" for line in e.prompt.split("\n")]
    for i, u in enumerate(e.upstream, 1):
        out.append(f"upstream request {i} of {len(e.upstream)}:" if len(e.upstream) > 1 else "upstream request:")
        where = u.url or "(the simulated server)"
        via = f" via {u.proxy}" if u.proxy else ""
        out.append(f"  {u.method} {where}{via}{'  (streamed answer)' if u.stream else ''}")
        out.append(f"  > {u.method} {u.target}")
        out += [f"  > {name}: {value}" for name, value in u.headers]
        if u.body is not None:
            out.append("  >")
            out += [f"  > {line}" for line in u.body.decode("utf-8", "replace").split("\n")]
    if e.dropped:
        out.append(f"the answer carries X-Gateway-Dropped-Params: {e.dropped}")
    if e.error is not None:
        out.append(f"refused: the client gets {e.error.status} ({e.error.content_type}):")
        out += [f"  {line}" for line in e.error.body.decode("utf-8", "replace").split("\n")]
    return "\n".join(out) + "\n"


def _backend(e: Explanation) -> str:
    what = e.backend_dialect + (f", model {e.model}" if e.model else "")
    if e.simulated:
        what += ", simulated"
    return what + (", pass-through" if e.passthrough else "")
