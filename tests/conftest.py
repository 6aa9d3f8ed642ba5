"""Shared fixtures: a fake upstream server and a factory for gateways built from config dicts."""

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.config import parse_config
from tests.support import FakeUpstream
from tests.tokenizer_kit import tokenizer_folder_fixture  # noqa: F401  (the `tokenizer_folder` fixture)


@pytest.fixture
async def upstream(aiohttp_server: Any) -> FakeUpstream:
    up = FakeUpstream()
    server = await aiohttp_server(up.app())
    up.url = str(server.make_url("")).rstrip("/")
    return up


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    """Every test runs on uvloop, the loop `gateway serve` runs on: its transports differ from
    asyncio's in ways that matter (a refused connection's half-close, for one)."""
    return {"uvloop": uvloop.new_event_loop}


GatewayFactory = Callable[[dict[str, Any]], Awaitable[TestClient]]


@pytest.fixture
def make_gateway(aiohttp_client: Any) -> GatewayFactory:
    """`await make_gateway(config_dict)` -> a TestClient talking to a running gateway."""

    async def make(config: dict[str, Any]) -> TestClient:
        return await aiohttp_client(create_app(parse_config(config)))

    return make


def one_route(dialect: str, backend_dialect: str, url: str, **backend: Any) -> dict[str, Any]:
    """The smallest config: one route of `dialect` in front of one backend at `url`."""
    b = {"dialect": backend_dialect, "url": url, **backend}
    return {"backends": {"up": b}, "routes": [{"name": "r", "dialect": dialect, "backend": "up"}]}
