"""Where a serving process gets its configuration, and what makes one fit to go live.

The source is the file given with `--config` (or `$GATEWAY_CONFIG`), read again on each reload,
or the embedded default, which has nothing to reread. A load checks everything start-up checks,
the certificate and key files the configuration names included, and gives the problems as the
same one-line-per-problem messages. A configuration is named by a short hash of the file's bytes
(of the embedded default's JSON form): the log line and the metric that say which one is live
show it. A file watch compares a fingerprint: the file's bytes and those of the certificate files
the live configuration names, so that a renewed certificate is picked up as well.
"""

import hashlib
import os
from collections.abc import Iterator

from gateway.config import Config, ConfigError
from gateway.configfile import embedded_default, load_config
from gateway.proxy.routing import make_ssl
from gateway.records import record
from gateway.server import listen_ssl

DIGEST_CHARS = 12


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:DIGEST_CHARS]


@record
class Loaded:
    """A configuration that passed every check, and its hash."""

    config: Config
    digest: str


def file_problems(config: Config) -> list[str]:
    """The certificate, key and CA files the configuration names that do not load."""
    problems = []
    try:
        listen_ssl(config)
    except OSError as e:
        problems.append(f"listen.tls: cannot load the certificate or key: {e}")
    for name, b in config.backends.items():
        try:
            make_ssl(b.tls)
        except OSError as e:
            problems.append(f"backends.{name}.tls: cannot load a certificate, key or CA file: {e}")
    return problems


def _tls_files(config: Config) -> Iterator[str]:
    tls = config.listen.tls
    if tls is not None:
        yield from (f for f in (tls.cert, tls.key, tls.client_ca) if f)
    for b in config.backends.values():
        if b.tls is not None:
            yield from (f for f in (b.tls.ca, b.tls.cert, b.tls.key) if f)


@record
class ConfigSource:
    path: str | None  # None: the embedded default

    @classmethod
    def given(cls, path: str | None) -> "ConfigSource":
        """`--config`, else `$GATEWAY_CONFIG`, else the embedded default; fixed for the process's life."""
        return cls(path or os.environ.get("GATEWAY_CONFIG") or None)

    def describe(self) -> str:
        return self.path if self.path is not None else "the embedded default"

    def load(self) -> Loaded:
        """Read and check the configuration; ConfigError with one line per problem."""
        if self.path is None:
            config = embedded_default()
            return Loaded(config, digest(config.model_dump_json().encode()))
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ConfigError([f"{self.path}: cannot read: {e.strerror}"]) from None
        config = load_config(self.path)
        problems = file_problems(config)
        if problems:
            raise ConfigError(problems)
        return Loaded(config, digest(data))

    def fingerprint(self, live: Config) -> str | None:
        """What a file watch compares: the file's bytes and the bytes of the certificate files
        `live` names. None without a file, or while the file cannot be read."""
        if self.path is None:
            return None
        h = hashlib.sha256()
        for name in (self.path, *_tls_files(live)):
            try:
                with open(name, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
            except OSError:
                if name == self.path:
                    return None
                h.update(b"unreadable")
        return h.hexdigest()
