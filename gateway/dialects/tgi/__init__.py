"""Hugging Face Text Generation Inference: /generate, /generate_stream, / (compat), /info, /health.

Its parsing and rendering are shared with MindIE's TGI-style routes (gateway.dialects.mindie).
"""

from gateway.codec.contract import Demo, Dialect
from gateway.dialects.tgi.inbound import TGIInbound
from gateway.dialects.tgi.outbound import TGIOutbound

# The embedded default also puts OpenAI's chat in front of its simulated server, whose model
# writes Hermes' tool calls: tools through a server that carries only text.
DIALECT = Dialect("tgi", TGIInbound(), TGIOutbound(), Demo(tool_parser="hermes", fronts=(("openai", "/tgi"),)))
