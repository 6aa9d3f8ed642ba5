"""The config: its models (gateway.config.models) and how one is read and checked
(gateway.config.loading). Reading it from a file, or making the embedded default, is
gateway.configfile's.

The shape is the contract docs/configuration.md describes, key by key. Dialect-specific `options`
are validated by the dialect's own options model, so an unknown option is a config error.
"""

from gateway.config.loading import check_options, expand_env, parse_config, path_collisions, route_paths
from gateway.config.models import (
    Auth,
    Backend,
    BackendTLS,
    Config,
    ConfigError,
    Limits,
    Listen,
    Logging,
    Metrics,
    ResponsesStore,
    Route,
    Shutdown,
    TLSListen,
    Tracing,
)

__all__ = [
    "Auth",
    "Backend",
    "BackendTLS",
    "Config",
    "ConfigError",
    "Limits",
    "Listen",
    "Logging",
    "Metrics",
    "ResponsesStore",
    "Route",
    "Shutdown",
    "TLSListen",
    "Tracing",
    "check_options",
    "expand_env",
    "parse_config",
    "path_collisions",
    "route_paths",
]
