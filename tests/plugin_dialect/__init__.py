"""A dialect that exists only in the test suite: one folder and one registry line make it a dialect
of the gateway. It is spoken only by clients (no outbound half): `POST /plain/generate` with
`{"text", "max"}` answered with `{"output", "finish"}`, whatever backend the route has."""

from gateway.codec.contract import Demo, Dialect
from tests.plugin_dialect.inbound import PlainInbound

# The embedded default answers its clients through a simulated OpenAI server.
DIALECT = Dialect("plain", inbound=PlainInbound(), demo=Demo(backend="openai"))
