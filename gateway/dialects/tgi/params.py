"""TGI's names for the neutral parameters: the `parameters` object of /generate, as derived from
the schema's marked fields (gateway.codec.fields). MindIE's TGI-style and native routes use the
same object with fields of their own. See docs/dialects/tgi.md.
"""

from gateway.codec.fields import reading, writing
from gateway.dialects.tgi.schema import TGI, Parameters

PARAMETERS_IN = reading(Parameters)
# Temperature, top_p, typical_p and do_sample go by the rules of outbound.sampling too.
PARAMETERS_OUT = writing(Parameters, TGI)
