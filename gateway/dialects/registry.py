"""The dialects by name."""

from gateway.codec.contract import Dialect
from gateway.dialects.databricks import DIALECT as DATABRICKS
from gateway.dialects.mindie import DIALECT as MINDIE
from gateway.dialects.openai import DIALECT as OPENAI
from gateway.dialects.tgi import DIALECT as TGI
from gateway.dialects.triton import DIALECT as TRITON

DIALECTS: dict[str, Dialect] = {d.name: d for d in (OPENAI, MINDIE, TGI, TRITON, DATABRICKS)}


def available() -> list[str]:
    return list(DIALECTS)


def get(name: str) -> Dialect:
    """The dialect called `name`; KeyError for an unknown one."""
    return DIALECTS[name]
