"""Fixtures of the integration tests, on the session's real server (tests/conftest.py's
``server``): clients of both decodings, a plain client for looking at keys, and the sync or
asyncio API for behaviour tests written once (support/flavours.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from support import flavours

import redlock_deco
from redlock_deco.testing import RedisServer


@pytest.fixture(params=[False, True], ids=["bytes", "decoded"])
def decode(request: pytest.FixtureRequest, server: RedisServer) -> Iterator[bool]:
    """Run the test with the default provider as a bytes and as a decode_responses client."""
    client = server.client(decode_responses=request.param)
    redlock_deco.register_provider("default", client)
    yield request.param
    client.close()


@pytest.fixture
def r(server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client on the test server, for looking at keys from the outside."""
    client = server.client()
    yield client
    client.close()


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, server: RedisServer) -> flavours.Api:
    """The sync or the asyncio API, for behaviour tests written once (see support/flavours.py)."""
    return (
        flavours.SyncApi(server.url) if request.param == "sync" else flavours.AsyncApi(server.url)
    )
