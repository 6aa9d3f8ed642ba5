"""The Triton dialect: the generate extension (/v2/models/{m}/generate[_stream]) and KServe v2
health and metadata, inbound; TRT-LLM, vLLM-backend and MindIE flavours outbound."""

from gateway.codec.contract import Dialect
from gateway.dialects.triton.inbound import TritonInbound
from gateway.dialects.triton.outbound import TritonOutbound

DIALECT = Dialect("triton", TritonInbound(), TritonOutbound())
