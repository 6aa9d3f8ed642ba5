"""The names Triton generate backends give the neutral parameters, per backend family, as derived
from the schema's marked fields (gateway.codec.fields).

- trtllm: the TensorRT-LLM ensemble's input tensors, sent at the top level of the body;
- vllm: Triton's vLLM backend, whose sampling settings travel in `sampling_parameters`, a JSON
  string (request parameters cannot hold the stop list);
- mindie: MindIE's variant, with TGI-like names under `parameters`.
What clients send is read by one validated model (gateway.dialects.triton.schema) that knows
every family's spellings. See docs/dialects/triton.md.
"""

from gateway.codec.fields import reading, writing
from gateway.dialects.triton import schema
from gateway.dialects.triton.schema import GenerateParameters, MindIEParameters

IN = reading(GenerateParameters)
TRTLLM = writing(GenerateParameters, schema.TRTLLM)
VLLM_SAMPLING = writing(GenerateParameters, schema.VLLM)
# Temperature, top_p and top_k within MindIE's ranges; do_sample as outbound.mindie_body says.
MINDIE = writing(MindIEParameters, schema.MINDIE)
