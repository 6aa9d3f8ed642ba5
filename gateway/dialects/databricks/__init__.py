"""The Databricks dialect: /serving-endpoints/{name}/invocations and the OpenAI-client form."""

from gateway.codec.contract import Dialect
from gateway.dialects.databricks.inbound import DatabricksInbound
from gateway.dialects.databricks.outbound import DatabricksOutbound

DIALECT = Dialect("databricks", DatabricksInbound(), DatabricksOutbound())
