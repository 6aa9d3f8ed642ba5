"""The dialects by name: the one place that lists them.

A dialect is one folder (gateway/dialects/NAME/) whose `__init__` declares its `DIALECT`, and
one line here. Either half may be absent: a dialect only clients speak has no outbound, one only
servers speak no inbound; the config refuses a route or a backend of a dialect without that half.
"""

from gateway.codec.contract import Dialect
from gateway.dialects.anthropic import DIALECT as ANTHROPIC
from gateway.dialects.databricks import DIALECT as DATABRICKS
from gateway.dialects.mindie import DIALECT as MINDIE
from gateway.dialects.openai import DIALECT as OPENAI
from gateway.dialects.responses import DIALECT as RESPONSES
from gateway.dialects.tgi import DIALECT as TGI
from gateway.dialects.triton import DIALECT as TRITON

DIALECTS: dict[str, Dialect] = {d.name: d for d in (OPENAI, MINDIE, TGI, TRITON, DATABRICKS, ANTHROPIC, RESPONSES)}


def available() -> list[str]:
    return list(DIALECTS)


def get(name: str) -> Dialect:
    """The dialect called `name`; KeyError for an unknown one."""
    return DIALECTS[name]


def inbound_names() -> list[str]:
    """The dialects clients may speak to a route."""
    return [name for name, d in DIALECTS.items() if d.inbound is not None]


def outbound_names() -> list[str]:
    """The dialects a backend may speak."""
    return [name for name, d in DIALECTS.items() if d.outbound is not None]
