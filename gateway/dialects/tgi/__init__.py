"""Hugging Face Text Generation Inference: /generate, /generate_stream, / (compat), /info, /health.

Its parsing and rendering are shared with MindIE's TGI-style routes (gateway.dialects.mindie).
"""

from gateway.codec.contract import Dialect
from gateway.dialects.tgi.inbound import TGIInbound
from gateway.dialects.tgi.outbound import TGIOutbound

DIALECT = Dialect("tgi", TGIInbound(), TGIOutbound())
