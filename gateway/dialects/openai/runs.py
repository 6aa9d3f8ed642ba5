"""A pass-through's runs of OpenAI chunks: which leading events of a read only carry tokens of
choices still under way, and so may go to the client as they came, undecoded; and the template
a renamed chat stream's token events are read by (gateway.codec.renaming.RenamedRuns)."""

from gateway import jsonutil
from gateway.codec.renaming import RenamedRuns
from gateway.sse import line_ends_are

_FINISH = b'"finish_reason":'
_NULL_FINISH = _FINISH + b"null"

# How many events at the end of a read are looked at one by one (a stream's end is a few).
_LOOK_BACK = 8


def under_way(event: bytes) -> bool:
    """Whether one event holds one choice, still under way: one finish, a null one. (Looked for
    with `find`: `bytes in bytes` first tries the needle as an integer, and the error it formats
    and drops costs more than the search.)"""
    at = event.find(_FINISH)
    return at >= 0 and event.startswith(b"null", at + len(_FINISH)) and event.find(_FINISH, at + 1) < 0


def tokens_only(data: bytes, end: int) -> int:
    """How many events `data[:end]` (whole events) holds if they are events of one `data:` line
    each, every one with a choice still under way, else 0: two line ends per event, one
    `"finish_reason":null` per event. An event that finishes, or holds only usage, an error or
    the end, has no such choice; a comment, another field or a second data line adds a line end.
    The totals prove each event only where an event holds one choice at most (the request asked
    for one): two choices under way in one event would make up for an event with none.
    (Counted, not split: these scans are the whole cost of a pass-through read.)"""
    events = data.count(_NULL_FINISH, 0, end)
    return events if events and line_ends_are(data, end, 2 * events) else 0


def token_event(data: bytes, start: int, end: int) -> bool:
    """Whether `data[start:end]` (one whole event) is one `data:` line with one choice under way."""
    return data.count(b"\n", start, end) == 2 and under_way(data[start:end])


def last_token(data: bytes) -> tuple[int, int]:
    """Where the last token event (see `token_event`) of a read that may go out in a run begins
    and ends: a read of whole events but perhaps its last, starting with a `data:` line, no CR
    in it. Back from its last whole event over those that need reading (a stream's end is a few:
    finish, usage, [DONE]); the usual read is a few token events, and the first one looked at is
    one. (0, 0) when there is none; the events before it must be token events too (`tokens_only`)."""
    if not data.startswith(b"data:") or 13 in data:  # a CR (its code: found by memchr)
        return 0, 0
    if data.find(b"\n") == len(data) - 2:  # one event of one line (a model server's pace)
        return (0, len(data)) if data.endswith(b"\n\n") and under_way(data) else (0, 0)
    end = data.rfind(b"\n\n") + 2
    for _ in range(_LOOK_BACK):
        if end < 2:
            break
        prev = data.rfind(b"\n\n", 0, end - 2)
        start = prev + 2 if prev >= 0 else 0
        if token_event(data, start, end):
            return start, end
        end = start
    return 0, 0


_CONTENT = b'"content":"'


def run_template(event: bytes, name: bytes) -> RenamedRuns | None:
    """The template a renamed chat stream's token events are read by (gateway.codec.renaming
    .RenamedRuns), from one of them (`event`: one `data:` line, one choice under way, its
    blank line): the bytes before its text and after it, when its text is a plain one (no
    escape), that choice's delta content; None otherwise."""
    at = event.find(_CONTENT)
    if at < 0 or event.find(_CONTENT, at + 1) >= 0:
        return None
    start = at + len(_CONTENT)
    end = event.find(b'"', start)
    if end <= start or event.find(b"\\", start, end) >= 0:
        return None  # an empty text (a stream's opening chunk), or one with escapes
    lead, tail = event[:start], event[end:]
    fixed = lead + tail
    if fixed.count(_FINISH) != 1 or fixed.count(_NULL_FINISH) != 1:
        return None
    try:
        obj = jsonutil.loads(event[event.find(b":") + 1 :])
    except jsonutil.JSONDecodeError:
        return None
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    delta = choices[0].get("delta")
    if not isinstance(delta, dict) or delta.get("content") != event[start:end].decode("utf-8", "replace"):
        return None
    return RenamedRuns.of(lead, tail, "model", name)
