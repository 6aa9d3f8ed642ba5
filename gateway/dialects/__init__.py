"""The dialects, each a folder with either half or both: what its clients send and expect
(inbound), and how to talk to such a server (outbound). `registry` names them; each folder has
the same files for the same jobs:

  __init__.py  its `DIALECT`: its name, its halves, how the embedded default mounts it
  schema.py    the request bodies its clients send, as validated wire models; each field that is
               a neutral parameter is marked with it, and with the servers that take it
  params.py    its words as data: names for the neutral parameters both ways (derived from those
               fields), and where it has them finish reasons and error types
  inbound.py   client bodies to neutral requests; its paths (`mounts`) and error bodies
  render.py    neutral answers (and, unless stream.py has them, stream events) to what its
               clients expect
  outbound.py  neutral requests to what its servers take (`carriage`, `build`)
  reading.py   what its servers answer, whole or streamed, to the neutral form

A dialect with more to say keeps it in a file named for it: `stream.py` (a stream renderer too
large to share render.py), the Responses API's `items.py` (its input items) and `stored.py` /
`state.py` (what it keeps between requests), Triton's `flavors.py` (its backend families) and
`simulated.py` (a simulated server of each family), Anthropic's `blocks.py` (its content blocks).
"""
