"""The Triton dialect: the generate extension (/v2/models/{m}/generate[_stream]) and KServe v2
health and metadata, inbound; TRT-LLM, vLLM-backend and MindIE flavours outbound."""

from gateway.codec.contract import Demo, Dialect
from gateway.dialects.triton.inbound import TritonInbound
from gateway.dialects.triton.outbound import TritonOutbound

# The embedded default answers Triton clients through a simulated OpenAI server: a simulated
# Triton server imitates TensorRT-LLM, which echoes the prompt unless asked not to, a poor first
# sight of the gateway. It puts OpenAI's chat in front of a simulated Triton server, whose model
# writes Hermes' tool calls: tools through a server that carries only text.
DIALECT = Dialect(
    "triton",
    TritonInbound(),
    TritonOutbound(),
    Demo(backend="openai", tool_parser="hermes", fronts=(("openai", "/triton"),)),
)
