"""Reading a TGI-wire upstream (Hugging Face TGI, MindIE's TGI-style and native routes):
whole answers, error bodies and the SSE stream, to the neutral form."""

from typing import Any

from gateway import jsonutil
from gateway.codec.errors import message_of
from gateway.codec.finish import FinishWords
from gateway.codec.learning import ALWAYS, SEEN
from gateway.codec.parsing import EventParser, broken_off
from gateway.codec.textchunks import TextChunks
from gateway.neutral.errors import UpstreamClass, UpstreamError, clip
from gateway.neutral.events import Event, FinishEvent, TextDelta, TextRun, UsageEvent, new_event
from gateway.neutral.types import Choice, Finish, Result, Usage

# What a token event changes from one to the next besides its text: the position, the token's id
# (which goes with the text) and log probability; MindIE's native route gives timings instead.
_VARYING = {"index": ALWAYS, "token.id": ALWAYS, "token.logprob": ALWAYS, "prefill_time": SEEN, "decode_time": SEEN}

_INT = {int}

FINISH_WORDS = FinishWords({"eos_token": Finish.EOS, "stop_sequence": Finish.STOP_STRING, "length": Finish.LENGTH})


def ids_list(value: Any) -> list[int] | None:
    """`token.id` as MindIE or TGI sends it: a number, a list of numbers, or null."""
    if type(value) is int:  # (a JSON true is a bool, not one)
        return [value]
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return value or None
    return None


def error_text(obj: Any) -> str:
    """The message of a `{"error", "error_type"}` body, `clip`ped; MindIE sometimes JSON-encodes
    it twice."""
    text = str(obj)
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("Error"))
        if isinstance(err, str):
            if err.startswith("{"):
                try:
                    return error_text(jsonutil.loads(err))
                except jsonutil.JSONDecodeError:
                    pass
            text = err
        elif err is not None:
            text = str(err)
    return clip(text)


def error_message(status: int, body: bytes) -> str:
    return message_of(body, error_text)


def parse_object(obj: Any, prompt_tokens: int | None = None, words: FinishWords = FINISH_WORDS) -> Result:
    """A whole TGI/MindIE answer (object, or the one-element array of `POST /`) to a Result;
    `words`: the server's finish vocabulary."""
    if isinstance(obj, list):
        obj = obj[0]
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    if "error" in obj and "generated_text" not in obj:
        raise UpstreamError(f"backend error: {error_text(obj)}", upstream_class=UpstreamClass.PROTOCOL)
    text = obj["generated_text"]
    if not isinstance(text, str):
        raise ValueError("generated_text is not a string")
    details = obj.get("details") or {}
    ids = details.get("generated_token_ids")
    if not isinstance(ids, list):
        toks = details.get("tokens")
        ids = [i for t in toks for i in ids_list(t.get("id")) or ()] if isinstance(toks, list) and toks else None
    finish = words.read(details.get("finish_reason")) if details else None
    completion = details.get("generated_tokens")
    prompt = details.get("prompt_tokens", details.get("input_length", prompt_tokens))
    usage = Usage(prompt, completion) if completion is not None or prompt is not None else None
    return Result([Choice(0, text, finish=finish or Finish.EOS, token_ids=ids or None)], usage)


class GenerateStreamParser(EventParser):
    """TGI `/generate_stream`, MindIE TGI-style and native streams, to neutral events.

    Accepts `data:` with or without a space, keep-alive comments, `token.id` as a number or a
    list, a final event whose token text is null (MindIE native: the last piece is recovered
    from `generated_text`), in-band `{"error"}` events, and raw text lines (MindIE's mid-stream
    failure), which become an UpstreamError; a stream without its final event is truncated.
    """

    __slots__ = ("_final", "_prompt_tokens", "_sent", "_words")
    # MindIE may end with its final event and no blank line after it: it still counts.
    unterminated_last = True

    def __init__(self, prompt_tokens: int | None = None, words: FinishWords = FINISH_WORDS) -> None:
        super().__init__(TextChunks("token.text", _VARYING, GenerateStreamParser._run, ("token.id",)))
        self._words = words
        self._final = False
        self._sent: list[str] = []
        self._prompt_tokens = prompt_tokens

    def _run(self, texts: list[str], held: dict[str, list[Any]], out: list[Event]) -> None:
        """A run of token events read from the template: what `on_event` does for each."""
        named = held.get("token.id")
        if len(texts) == 1:  # a model server's pace: an event a read
            text, ident = texts[0], None if named is None else named[0]
            if text:
                out.append(new_event(TextDelta, (text, 0, None, ids_list(ident))))
                self._sent.append(text)
            return
        # The usual: one id a token, a number each.
        if named is not None and "" not in texts and set(map(type, named)) == _INT:
            out.append(new_event(TextRun, (texts, 0, named)))
            self._sent += texts
            return
        for text, ident in zip(texts, named or [None] * len(texts), strict=True):
            if text:
                out.append(new_event(TextDelta, (text, 0, None, ids_list(ident))))
                self._sent.append(text)

    def on_end(self, out: list[Event]) -> None:
        if not self._final:
            raise UpstreamError("backend stream ended before its final event", upstream_class=UpstreamClass.MIDSTREAM)

    def on_event(self, data: bytes, out: list[Event]) -> None:
        if self._final:
            return
        try:
            obj = jsonutil.loads(data)
        except jsonutil.JSONDecodeError:
            raise broken_off(data.decode("utf-8", "replace")) from None
        if not isinstance(obj, dict):
            raise broken_off(data.decode("utf-8", "replace"))
        if "error" in obj:
            raise UpstreamError(f"backend error mid-stream: {error_text(obj)}", upstream_class=UpstreamClass.MIDSTREAM)
        tok = obj.get("token") or {}
        ids = ids_list(tok.get("id"))
        text = tok.get("text")
        if isinstance(text, str) and text and not tok.get("special"):
            out.append(TextDelta(text, 0, None, ids))
            self._sent.append(text)
            ids = None
        gen = obj.get("generated_text")
        if gen is None:
            if type(text) is str and text and not tok.get("special"):
                self.teach(data, 0, text)
            return
        self._final = True
        if self._chunks is not None:
            self._chunks.stop()  # what comes after the final event is not read
        sent = "".join(self._sent)
        if isinstance(gen, str) and len(gen) > len(sent) and gen.startswith(sent):
            out.append(TextDelta(gen[len(sent) :], 0, None, ids))
        details = obj.get("details") or {}
        out.append(FinishEvent(self._words.read(details.get("finish_reason")) or Finish.EOS))
        prompt = details.get("prompt_tokens", details.get("input_length", self._prompt_tokens))
        completion = details.get("generated_tokens")
        if prompt is not None or completion is not None:
            out.append(UsageEvent(Usage(prompt, completion)))
