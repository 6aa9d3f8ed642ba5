"""Chat templates: turning chat messages into the prompt a text-only backend expects.

Templates are the model's own Jinja templates and are rendered the way Hugging Face
transformers renders them (same environment options, helpers and variables), because that is
what the model was trained against; a different rendering quietly degrades answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from gateway.adapters.tokenizer import read_config, special_tokens
from gateway.neutral.errors import InvalidRequest
from gateway.neutral.types import Message


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks.

    Some templates use it; rendering a prompt only needs the body, so it is a no-op wrapper.
    """

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


# What `tojson` is asked for most (a tool, a message's arguments): json.dumps with its defaults
# but for ensure_ascii, which json.dumps serves by building an encoder on every call.
_PLAIN_JSON = json.JSONEncoder(ensure_ascii=False)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; prompts must carry them verbatim.
    if not ensure_ascii and indent is None and separators is None and not sort_keys:
        return _PLAIN_JSON.encode(value)
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


# The names a plain dict answers as attributes (it has no others: no instance __dict__).
_DICT_ATTRIBUTES = frozenset(dir(dict))


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox transformers renders with, quicker on what templates read most.

    `message.role` on a dict first tries the attribute, which a dict lacks, and only then the
    key; the failed attempt raises and catches an exception, a third of a short template's
    rendering time. A plain dict's attributes are known in advance, so any other name goes
    straight to the key, with the same result as the slow way, a missing key included."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)


def _environment() -> ImmutableSandboxedEnvironment:
    env = _Environment(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _environment()


def _flat(template: jinja2.Template) -> jinja2.Template:
    """`template` with its globals in one dict of its own. Jinja keeps them as a chain over the
    environment's, and merges that chain key by key in Python on every render (more than half of
    a short chat template's rendering time); the environment's globals are set once, above, so
    the merged copy never goes stale. The chain itself is left as it was: it is shared."""
    template.globals = dict(template.globals)
    return template


# A template that walks the content parts itself (or tests the content's type) takes the list;
# any other template would print a list's repr, so it gets the text parts joined.
_LIST_AWARE = re.compile(
    r"content['\"\]]*\s+is\s+(?:not\s+)?(?:string|iterable|sequence|mapping)|\bin\s+[\w.\[\]'\"]*content"
)


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """OpenAI carries tool-call arguments as a JSON string; templates expect the object."""
    fn = call.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    try:
        args = json.loads(fn["arguments"])
    except ValueError:
        return call
    if not isinstance(args, dict):
        return call
    return {**call, "function": {**fn, "arguments": args}}


def message_dict(m: Message, list_content: bool = True) -> dict[str, Any]:
    """A message as the OpenAI-style dict chat templates are written against."""
    content: Any = m.content
    if isinstance(content, list) and not list_content:
        content = m.text()
    d: dict[str, Any] = {"role": m.role, "content": content}
    if m.name is not None:
        d["name"] = m.name
    if m.tool_calls:
        d["tool_calls"] = [_tool_call(c) for c in m.tool_calls]
    if m.tool_call_id is not None:
        d["tool_call_id"] = m.tool_call_id
    if m.reasoning_content is not None:
        d["reasoning_content"] = m.reasoning_content
    return d


class ChatTemplate:
    """The model's chat template(s) plus the special tokens they may refer to."""

    def __init__(self, templates: dict[str, str], specials: dict[str, str | None] | None = None) -> None:
        if "default" not in templates:
            raise ValueError("no default chat template")
        self._sources = templates
        self._compiled = {name: _flat(_ENV.from_string(src)) for name, src in templates.items()}
        self._list_aware = {name: bool(_LIST_AWARE.search(src)) for name, src in templates.items()}
        # The named special tokens the model has, as the variables every render starts from.
        self._named = {k: v for k, v in (specials or {}).items() if v is not None}

    @classmethod
    def load(cls, folder: str) -> ChatTemplate:
        """From `chat_template.jinja` (which wins, as in transformers) or tokenizer_config.json."""
        config = read_config(folder)
        templates: dict[str, str] = {}
        jinja_file = Path(folder) / "chat_template.jinja"
        raw = config.get("chat_template")
        if jinja_file.is_file():
            templates["default"] = jinja_file.read_text(encoding="utf-8")
        elif isinstance(raw, str):
            templates["default"] = raw
        elif isinstance(raw, list):
            for entry in raw:
                if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                    templates[entry["name"]] = str(entry.get("template", ""))
        if not templates:
            raise FileNotFoundError(f"no chat template in {folder}")
        return cls(templates, special_tokens(config))

    def render(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        name = "tool_use" if tools and "tool_use" in self._compiled else "default"
        list_content = self._list_aware[name]
        template = self._compiled[name]
        # What `Template.render` does, with the globals, the special tokens and the variables
        # merged into the context's one dict at once rather than copied twice on the way.
        variables: dict[str, Any] = {**template.globals, **self._named, **kwargs}
        variables.update(
            messages=[message_dict(m, list_content) for m in messages],
            tools=tools or None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
        )
        context = _ENV.context_class(_ENV, variables, template.name, template.blocks, globals=template.globals)
        try:
            return "".join(template.root_render_func(context))
        except jinja2.TemplateError as e:
            raise InvalidRequest(f"the model's chat template rejected the messages: {e.message or e}") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            raise InvalidRequest(f"the model's chat template failed on the messages: {e}") from None

    @property
    def names(self) -> Sequence[str]:
        return tuple(self._sources)
