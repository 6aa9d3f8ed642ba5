"""The real-server tier: tests against servers nobody here wrote (see servers.py).

Every test in this folder carries the `real` marker: `pytest -m "not real"` runs the fast suite
alone, `pytest -m real` this tier alone; plain `pytest` (what CI runs) runs both. The servers
are started once per session and stopped at its end, unless GATEWAY_REAL_VLLM and
GATEWAY_REAL_TRITON name servers already running (`python -m tests.real.servers` starts both
and prints them).
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real import servers

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real)


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    return servers.tiny_model()


@pytest.fixture(scope="session")
def vllm(tiny_model: Path) -> Iterator[servers.Server]:
    server = servers.running("GATEWAY_REAL_VLLM") or servers.start_vllm(tiny_model)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def triton() -> Iterator[servers.Server]:
    server = servers.running("GATEWAY_REAL_TRITON") or servers.start_triton()
    yield server
    server.stop()
