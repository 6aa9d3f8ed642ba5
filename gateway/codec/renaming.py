"""What a pass-through changes of a backend's bytes: the model's name, renamed as the client
named it in each answer and event, with every other byte as it came. A name is found and
replaced in the bytes (an event's first `model` field, the top-level one in every dialect that
names its model so), and a run of a stream's events is renamed in one pass where it is proven
to hold one such field an event."""

import re
from functools import lru_cache
from operator import itemgetter

from gateway.sse import lines_of


@lru_cache(maxsize=8)
def _field(key: str) -> re.Pattern[bytes]:
    return re.compile(b'"' + key.encode() + rb'"(\s*:\s*)"(?:[^"\\]|\\.)*"')


@lru_cache(maxsize=8)
def _quoted(key: str) -> bytes:
    return b'"' + key.encode() + b'"'


def renamed(data: bytes, key: str, name: bytes) -> bytes:
    """A backend's JSON answer or event with its first `key` string field set to `name` (JSON
    bytes): a pass-through keeps every byte but the model's name, which the client gave. The
    first such field is the top-level one in every dialect that names the model this way (a
    `key` inside a string value is escaped, so it never matches)."""
    found = renamed_first(data, key, name)
    return data if found is None else found


def renamed_first(data: bytes, key: str, name: bytes) -> bytes | None:
    """`data` with its first `key` string field set to `name`; None when it has no such field."""
    # The usual answer: the key's first occurrence is the field, written `"key":"value"` with
    # nothing escaped in the value, which is what the expression would match there.
    quoted = _quoted(key)
    at = data.find(quoted)
    if at < 0:
        return None
    start = at + len(quoted)
    if data.startswith(b':"', start):
        end = data.find(b'"', start + 2)
        if end >= 0 and data.find(b"\\", start + 2, end) < 0:
            return b"".join((data[: start + 1], name, data[end + 1 :]))
    out, n = _field(key).subn(lambda m: b'"' + key.encode() + b'"' + m.group(1) + name, data, count=1)
    return out if n else None


class Renamer:
    """A run of one stream's whole events, each with its first `key` field renamed, as reading
    them one by one renames them (`renamed`), where that field holds the same bytes in each:
    once seen, the field is replaced as bytes, with no match and no Python call per event. The
    replacement stands when every `key` in the run was that field, one for each of its `events`:
    counted in what it gives (the new field holds the key `_keys` times, and the pieces between
    the fields say how many were replaced), one count of the run where counting the field first
    took two. Otherwise (a key of another value, an event without one) each event is renamed on
    its own."""

    __slots__ = ("_key", "_keys", "_name", "_new", "_old", "_quoted")

    def __init__(self, key: str, name: bytes) -> None:
        self._key = key
        self._name = name
        self._quoted = b'"' + key.encode() + b'"'
        self._old = b""  # the field as the stream writes it (`"model":"tiny"`)
        self._new = b""
        self._keys = 1

    def __call__(self, data: bytes, events: int) -> bytes:
        old, new = self._old, self._new
        if not old or data.find(old) < 0:
            found = _field(self._key).search(data)
            if found is None:
                return data
            old = self._old = found.group(0)
            new = self._new = self._quoted + found.group(1) + self._name
            self._keys = new.count(self._quoted)
        # A split and a join: one pass to find the fields where a replace makes two, and how many
        # it found.
        pieces = data.split(old)
        out = new.join(pieces)
        if len(pieces) - 1 == events and out.count(self._quoted) == events * self._keys:
            return out
        return b"\n\n".join([renamed(event, self._key, self._name) for event in data.split(b"\n\n")])


class RenamedRuns:
    """A renamed pass-through's runs of token events read by their template: each event one
    `data:` line, the template's `lead`, a text, and its `tail` (the blank line included), where
    the lead and tail hold the one `key` field the stream's events have and the text holds no
    quote (so no field of its own). A run proven so is renamed in one join, the new lead and tail
    between its texts: what renaming each event's field gives, without a pass over the run to
    find them and another to count the key. (The dialect learns the template from one event it has
    proven, see gateway.dialects.openai.reading.)"""

    __slots__ = ("_between", "_lead", "_middle", "_new_between", "_new_lead", "_new_tail", "_tail")

    @classmethod
    def of(cls, lead: bytes, tail: bytes, key: str, name: bytes) -> "RenamedRuns | None":
        """The template of events written `lead`, a text, `tail`; None unless those bytes hold
        `key` once, as a string field."""
        fixed = lead + tail
        if fixed.count(_quoted(key)) != 1 or _field(key).search(fixed) is None:
            return None
        return cls(lead, tail, key, name)

    def __init__(self, lead: bytes, tail: bytes, key: str, name: bytes) -> None:
        self._lead, self._tail = lead, tail
        self._new_lead, self._new_tail = renamed(lead, key, name), renamed(tail, key, name)
        self._between = tail + lead
        self._new_between = self._new_tail + self._new_lead
        # An event's text in its line: after the lead, before the tail (whose blank line is not
        # in the line, its first line end is).
        self._middle = slice(len(lead), 1 - len(tail))

    def __call__(self, data: bytes, start: int, end: int, head: bytes = b"") -> tuple[bytes, int] | None:
        """The events of `data` from `start` to `end` (whole events) renamed, after `head`, and
        how many they are; None unless every one of them is the template's. (Read in place: the
        run's bytes are copied once, into what it gives.)"""
        lead, tail = self._lead, self._tail
        # Its first event is looked at first: a stream whose events differ elsewhere (an id or a
        # padding of their own) is told at once.
        if not data.startswith(lead, start) or not data.endswith(tail, start, data.find(b"\n\n", start) + 2):
            return None
        if not data.endswith(tail, start, end):
            return None
        # The run is the texts between the template's bytes when joining them so gives it back:
        # each text then lies in its own line between the lead and the tail.
        texts = list(map(itemgetter(self._middle), lines_of(data[start:end])[::2]))
        joined = self._between.join(texts)
        if len(joined) != end - start - len(lead) - len(tail) or not data.startswith(joined, start + len(lead)):
            return None
        if b"".join(texts).find(b'"') >= 0:
            return None
        texts[0] = head + self._new_lead + texts[0]
        texts[-1] += self._new_tail
        return self._new_between.join(texts), len(texts)
