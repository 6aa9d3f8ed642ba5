"""Reading an OpenAI-compatible server: whole answers, error bodies and the SSE chunk stream."""

from typing import Any

from gateway import jsonutil
from gateway.codec.errors import message_of
from gateway.codec.finish import FinishWords
from gateway.codec.learning import ALWAYS, SEEN
from gateway.codec.parsing import PARSE_ERRORS, EventParser, kept
from gateway.codec.renaming import RenamedRuns, Renamer, renamed
from gateway.codec.textchunks import TextChunks
from gateway.dialects.openai.params import FINISH_WORDS as WORDS
from gateway.dialects.openai.runs import last_token, run_template, token_event, tokens_only
from gateway.neutral.errors import UpstreamClass, UpstreamError, clip
from gateway.neutral.events import Event, FinishEvent, Frame, ReasoningDelta, TextDelta, ToolCallDelta, UsageEvent
from gateway.neutral.types import Answer, Choice, EmbeddingResult, Finish, Request, Result, Task, Usage
from gateway.sse import DONE


def finish_of(words: FinishWords, finish_reason: object, stop_reason: object = None) -> Finish | None:
    """A choice's finish, sharpened by vLLM's `stop_reason`: the stop string that matched (a
    string), the stop token (an integer), or nothing for the end-of-sequence token."""
    reason = words.read(finish_reason)
    if reason is Finish.EOS and stop_reason is not None:
        return Finish.STOP_TOKEN if isinstance(stop_reason, int) else Finish.STOP_STRING
    return reason


def matched_stop(c: dict[str, Any]) -> str | None:
    """The stop string vLLM says ended a choice (`stop_reason`; an integer there is a token)."""
    stop = c.get("stop_reason")
    return stop if type(stop) is str else None


def usage_from(obj: Any) -> Usage | None:
    if not isinstance(obj, dict):
        return None
    extra = {k: obj[k] for k in ("prompt_tokens_details", "completion_tokens_details") if obj.get(k)}
    return Usage(obj.get("prompt_tokens"), obj.get("completion_tokens"), extra or None)


def token_ids(value: Any) -> list[int] | None:
    """vLLM's `token_ids` (asked with `return_token_ids`): a list of ids, else nothing."""
    return value if type(value) is list and value and all(type(i) is int for i in value) else None


def chat_logprobs(lp: Any) -> list[dict[str, Any]] | None:
    content = lp.get("content") if isinstance(lp, dict) else None
    return content if isinstance(content, list) else None


def completion_logprobs_to_neutral(lp: Any) -> list[dict[str, Any]] | None:
    if not isinstance(lp, dict) or not isinstance(lp.get("tokens"), list):
        return None
    tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
    return [
        {
            "token": tok,
            "logprob": val,
            "top_logprobs": [{"token": k, "logprob": v} for k, v in (top or {}).items()],
        }
        for tok, val, top in zip(lp["tokens"], lp.get("token_logprobs") or [], tops, strict=False)
    ]


def _reasoning(message: dict[str, Any]) -> str | None:
    """The model's reasoning: `reasoning_content` (DeepSeek's name, and vLLM's before 0.10),
    `reasoning` (vLLM's since), or Databricks' `reasoning` content parts."""
    value = message.get("reasoning_content")
    if value is None:
        value = message.get("reasoning")
    if value is None and isinstance(message.get("content"), list):
        texts = [
            s.get("text") or ""
            for part in message["content"]
            if isinstance(part, dict) and part.get("type") == "reasoning"
            for s in part.get("summary") or ()
            if isinstance(s, dict)
        ]
        value = "".join(texts) if texts else None
    return value if isinstance(value, str) else None


def _content(message: dict[str, Any]) -> str | None:
    """The answer's text: a string, or the `text` parts of a list (Databricks' reasoning models)."""
    value = message.get("content")
    if isinstance(value, list):
        return "".join(p.get("text") or "" for p in value if isinstance(p, dict) and p.get("type") == "text")
    return value if isinstance(value, str) else None


def usage_only(choices: Any, obj: dict[str, Any]) -> bool:
    """A chunk that carries nothing but usage: no choices, or choices with nothing in them (the
    way LiteLLM writes its usage chunk)."""
    if not obj.get("usage"):
        return False
    return all(
        isinstance(c, dict) and not c.get("delta") and not c.get("text") and c.get("finish_reason") is None
        for c in choices
    )


def text_deltas(out: list[Event], text: str, index: int, logprobs: Any, ids: list[int] | None) -> None:
    """One chunk's text as neutral deltas: one per generated token where the backend says which
    ids it generated (vLLM holds back a token that ends inside a character and sends it with the
    next), the text on the last; a token whose text is empty (a matched stop) still counts."""
    if ids is None or len(ids) < 2:
        out.append(TextDelta(text, index, logprobs, ids))
        return
    per_token = isinstance(logprobs, list) and len(logprobs) == len(ids)
    for k, token in enumerate(ids[:-1]):
        out.append(TextDelta("", index, [logprobs[k]] if per_token else None, [token]))
    out.append(TextDelta(text, index, logprobs[-1:] if per_token else logprobs, ids[-1:]))


# What a pass-through stream reports of a chunk it does not decode: a token came (for the
# time-to-first-token and inter-token metrics); the chunk itself goes out as a Frame.
A_TOKEN = TextDelta("")


# A chat delta with these keys at most, its content a string, is plain text; so is one whose
# other keys are null (SGLang names every field of a delta in each).
_PLAIN_DELTA = frozenset(("role", "content"))
# What a text chunk may change from one to the next that its reading ignores: the id and time
# (some servers give each chunk its own), the API's random padding that hides the text's length.
_VARYING = {"id": SEEN, "created": SEEN, "obfuscation": ALWAYS, "system_fingerprint": SEEN}


def error_text(obj: Any) -> str:
    """The message of an error body (`{"error": {"message"}}` or `{"error": "..."}`), `clip`ped."""
    text = str(obj)
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            text = str(err.get("message") or err)
        elif isinstance(err, str):
            text = err
    return clip(text)


def error_message(body: bytes) -> str:
    return message_of(body, error_text)


def passthrough_body(req: Request, body: bytes, rename: bytes | None) -> Result:
    """A same-wire answer, which goes to the client as it came (its model renamed when the
    route renames it): only what the metrics need is read, its usage. An error body, or one
    without its choices (or data), is no answer."""
    obj = jsonutil.loads(body)
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    if obj.get("error"):
        raise UpstreamError(f"backend error: {error_text(obj)}", upstream_class=UpstreamClass.PROTOCOL)
    items = obj["data" if req.task is Task.EMBEDDING else "choices"]
    if not isinstance(items, list):
        raise ValueError("no choices")
    # Each choice's finish, for whoever observes the exchange (a trace); the text is not read.
    choices = (
        []
        if req.task is Task.EMBEDDING
        else [
            Choice(c.get("index", 0), finish=finish_of(WORDS, c.get("finish_reason"), c.get("stop_reason")))
            for c in items
        ]
    )
    out = body if rename is None else renamed(body, "model", rename)
    return Result(choices, usage_from(obj.get("usage")), obj.get("model"), out)


def parse_body(req: Request, body: bytes, words: FinishWords = WORDS) -> Answer:
    """A whole answer; `words`: the finish vocabulary of the server (one that copies OpenAI's
    shapes may use words of its own)."""
    obj = jsonutil.loads(body)
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    if obj.get("error"):
        raise UpstreamError(f"backend error: {error_text(obj)}", upstream_class=UpstreamClass.PROTOCOL)
    if req.task is Task.EMBEDDING:
        items = sorted(obj["data"], key=lambda d: d.get("index", 0))
        return EmbeddingResult([d["embedding"] for d in items], usage_from(obj.get("usage")), obj.get("model"))
    choices = []
    for c in obj["choices"]:
        finish = finish_of(words, c.get("finish_reason"), c.get("stop_reason"))
        ids = token_ids(c.get("token_ids"))
        if req.task is Task.CHAT:
            msg = c.get("message") or {}
            choices.append(
                Choice(
                    index=c.get("index", 0),
                    text=_content(msg) or "",
                    reasoning=_reasoning(msg),
                    tool_calls=msg.get("tool_calls") or None,
                    finish=finish,
                    stop=matched_stop(c),
                    logprobs=chat_logprobs(c.get("logprobs")),
                    token_ids=ids,
                )
            )
        else:
            choices.append(
                Choice(
                    index=c.get("index", 0),
                    text=c.get("text") or "",
                    finish=finish,
                    stop=matched_stop(c),
                    logprobs=completion_logprobs_to_neutral(c.get("logprobs")),
                    token_ids=ids,
                )
            )
    return Result(choices, usage_from(obj.get("usage")), obj.get("model"))


class OpenAIStreamParser(EventParser):
    """Chat or completion chunks from an OpenAI-style SSE stream, to neutral events."""

    __slots__ = (
        "_chat",
        "_done",
        "_empty",
        "_finished",
        "_one_choice",
        "_passthrough",
        "_rename",
        "_renamer",
        "_runs",
        "_words",
    )

    def __init__(
        self,
        chat: bool,
        passthrough: bool = False,
        rename: bytes | None = None,
        words: FinishWords = WORDS,
        choices: int = 1,
    ) -> None:
        # Translating, text chunks are read from the first one's template (a pass-through
        # forwards them undecoded instead).
        text = "choices.delta.content" if chat else "choices.text"
        super().__init__(None if passthrough else TextChunks(text, _VARYING), passthrough)
        self._chat = chat
        self._passthrough = passthrough
        self._rename = rename
        self._renamer = None if rename is None else Renamer("model", rename)
        # A renamed chat stream's token events, read by their template once it is learned;
        # False once its events turn out not to be the template's.
        self._runs: RenamedRuns | bool | None = None if rename is not None and chat else False
        self._words = words
        # Asked for one choice, an event holds one at most: the counts that prove a run of
        # token events (`tokens_only`) then prove each of its events. With more, an event of
        # two choices under way could make up for one of none (a finish, usage) in the totals.
        self._one_choice = choices == 1
        self._done = False
        self._finished = False
        self._empty = b'"content":""' if chat else b'"text":""'

    def feed(self, data: bytes) -> list[Event]:
        if self._passthrough:
            data = self.taken_back(data)
        plain = self._passthrough and self._fault is None and self._decoder.between_events()
        start, end = last_token(data) if plain else (0, 0)
        if not end:
            return super().feed(data)
        # The read's leading events only carry tokens: they go out as they came, undecoded (a
        # renamed stream's renamed, by their template where they are its events), and tell the
        # metrics a token came, unless the read is one event with empty content (the role chunk
        # that opens a chat stream is not a token; a read of several events holds tokens but
        # for a stream's empty chunks in one read, counted as a token too early at worst). The
        # rest is read event by event.
        templated = self._templated(data, start, end) if start and self._runs is not False else None
        if templated is not None:
            relayed, events = templated
        else:
            events = (tokens_only(data, end) if self._one_choice else 0) if start else 1
            if not events:
                return super().feed(data)
            relayed = data[:end] if self._renamer is None else self._renamer(data[:end], events)
        self._decoder.skipped()
        self._began = True
        out: list[Event] = [Frame(relayed)]
        if events > 1 or data.find(self._empty, 0, end) < 0:
            out.append(A_TOKEN)
        if end < len(data):
            try:
                out += super().feed(data[end:])
            except PARSE_ERRORS as e:
                self._fault = kept(e)  # raised at the next read, after what came before it went out
        return out

    def _templated(self, data: bytes, start: int, end: int) -> tuple[bytes, int] | None:
        """A renamed read's token events up to `end` (the last from `start`) renamed, and how
        many, when they are the template's (the first may be another token event, the stream's
        opening one); None when they are not (the counts then prove them)."""
        runs = self._runs
        if runs is None:
            assert self._rename is not None
            runs = run_template(data[start:end], self._rename)
            if runs is None:
                return None  # its text was empty or escaped: the next read's may teach it
            self._runs = runs
        assert isinstance(runs, RenamedRuns)
        proved = runs(data, 0, end)
        if proved is not None:
            return proved
        first = data.find(b"\n\n") + 2
        if first < end and token_event(data, 0, first):
            assert self._renamer is not None
            proved = runs(data, first, end, self._renamer(data[:first], 1))
            if proved is not None:
                return proved[0], proved[1] + 1
        self._runs = False  # its events differ from the template (an id or a padding of their own)
        return None

    def on_end(self, out: list[Event]) -> None:
        if not self._done and not self._finished:
            raise UpstreamError("backend stream ended before it was complete", upstream_class=UpstreamClass.MIDSTREAM)

    def on_event(self, data: bytes, out: list[Event]) -> None:
        chunks = self._chunks
        if data == DONE:
            self._done = True
            return
        obj = jsonutil.loads(data)
        if obj.get("error"):
            raise UpstreamError(f"backend error mid-stream: {error_text(obj)}", upstream_class=UpstreamClass.MIDSTREAM)
        choices = obj.get("choices") or ()
        if self._passthrough:
            bare = usage_only(choices, obj)
            final = not bare and any(c.get("finish_reason") is not None for c in choices)
            fingerprint = obj.get("system_fingerprint") if bare else None
            payload = self.relayed(data, "model", self._rename)
            out.append(Frame(payload, bare, final, fingerprint if isinstance(fingerprint, str) else None))
        for c in choices:
            if c.get("finish_reason") is None and c.get("logprobs") is None and c.get("token_ids") is None:
                # The usual chunk: a piece of text and nothing else, read without the general
                # rules below (which give the same event).
                if self._chat:
                    delta = c.get("delta") or {}
                    text = delta.get("content")
                    plain = type(text) is str and (
                        delta.keys() <= _PLAIN_DELTA or all(delta[k] is None for k in delta.keys() - _PLAIN_DELTA)
                    )
                else:
                    text = c.get("text")
                    plain = type(text) is str
                if plain:
                    if text:
                        out.append(TextDelta(text, c.get("index", 0)))
                        if chunks is not None and len(choices) == 1 and not obj.get("usage"):
                            self.teach(data, c.get("index", 0), text)
                    continue
            i = c.get("index", 0)
            ids = token_ids(c.get("token_ids"))
            if self._chat:
                delta = c.get("delta") or {}
                text = _content(delta)
                if text or ids:
                    text_deltas(out, text or "", i, chat_logprobs(c.get("logprobs")), ids)
                reasoning = _reasoning(delta)
                if reasoning:
                    out.append(ReasoningDelta(reasoning, i))
                for tc in delta.get("tool_calls") or ():
                    fn = tc.get("function") or {}
                    out.append(
                        ToolCallDelta(tc.get("index", 0), tc.get("id"), fn.get("name"), fn.get("arguments") or "", i)
                    )
            else:
                text = c.get("text")
                if text or ids:
                    text_deltas(out, text or "", i, completion_logprobs_to_neutral(c.get("logprobs")), ids)
            reason = finish_of(self._words, c.get("finish_reason"), c.get("stop_reason"))
            if reason is not None:
                self._finished = True
                out.append(FinishEvent(reason, i, matched_stop(c)))
        usage = obj.get("usage")
        if usage:
            u = usage_from(usage)
            if u is not None:
                out.append(UsageEvent(u))
