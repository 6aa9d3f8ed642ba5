"""Huawei MindIE Server: native, TGI-style, vLLM-style and OpenAI-flavoured routes, both ways.

Its TGI-style routes reuse the TGI dialect's parsing and rendering; its OpenAI-flavoured routes
reuse the OpenAI dialect's. Only MindIE's differences live here.
"""

from gateway.codec.contract import Dialect
from gateway.dialects.mindie.inbound import MindIEInbound
from gateway.dialects.mindie.outbound import MindIEOutbound

DIALECT = Dialect("mindie", MindIEInbound(), MindIEOutbound())
