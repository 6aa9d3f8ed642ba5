"""The five dialects, each both ways: what its clients send and expect (inbound), and how to talk to
such a server (outbound). `registry` names them; each folder has the same files for the same jobs:

  schema.py    the request bodies its clients send, as validated wire models; each field that is
               a neutral parameter is marked with it, and with the servers that take it
  params.py    its names for the neutral parameters, both ways, derived from those fields
  inbound.py   client bodies to neutral requests; its paths (`mounts`) and error bodies
  render.py    neutral answers and stream events to what its clients expect
  outbound.py  neutral requests to what its servers take (`carriage`, `build`)
  reading.py   what its servers answer, whole or streamed, to the neutral form
"""
