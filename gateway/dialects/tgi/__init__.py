"""Hugging Face Text Generation Inference: /generate, /generate_stream, / (compat), /info, /health.

The wire code in `wire.py` is shared with MindIE's TGI-style routes (gateway.dialects.mindie).
"""

from gateway.dialects.base import Dialect
from gateway.dialects.tgi.inbound import TGIInbound
from gateway.dialects.tgi.outbound import TGIOutbound

DIALECT = Dialect("tgi", TGIInbound(), TGIOutbound())
