"""Huawei MindIE Server: native, TGI-style, vLLM-style and OpenAI-flavoured routes, both ways.

The TGI-style wire is shared with gateway.dialects.tgi; the OpenAI-flavoured routes reuse
gateway.dialects.openai. Only MindIE's differences live here.
"""

from gateway.dialects.base import Dialect
from gateway.dialects.mindie.inbound import MindIEInbound
from gateway.dialects.mindie.outbound import MindIEOutbound

DIALECT = Dialect("mindie", MindIEInbound(), MindIEOutbound())
