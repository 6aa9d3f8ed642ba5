"""Huawei MindIE Server: native, TGI-style, vLLM-style and OpenAI-flavoured routes, both ways.

Its TGI-style routes reuse the TGI dialect's parsing and rendering; its OpenAI-flavoured routes
reuse the OpenAI dialect's. Only MindIE's differences live here.
"""

from gateway.codec.contract import Demo, Dialect
from gateway.dialects.mindie.inbound import MindIEInbound
from gateway.dialects.mindie.outbound import MindIEOutbound

# It shares OpenAI's paths, so the embedded default mounts it under a prefix of its own. Its
# simulated server's model writes Hermes' tool calls: chat with tools goes to /infer, emulated.
DIALECT = Dialect("mindie", MindIEInbound(), MindIEOutbound(), Demo(prefix="/mindie", tool_parser="hermes"))
