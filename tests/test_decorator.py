"""``@locked`` behaviour: busy handling, re-entrancy without round trips, lost leases,
metadata preservation, and bad input refused at decoration time."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from redlock_deco import locked


def commands(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if not k.startswith("cmdstat_info"))


def hold_in_thread(name: str, release: threading.Event, ttl: float = 5) -> threading.Thread:
    """Hold ``lock:<name>`` from another thread until ``release`` is set."""
    held = threading.Event()

    @locked(name, ttl=ttl)
    def holder() -> None:
        held.set()
        release.wait(10)

    t = threading.Thread(target=holder, daemon=True)
    t.start()
    assert held.wait(5)
    return t


def test_wait_none_waits_past_the_socket_timeout(server: Any) -> None:
    # A 0.4 s socket timeout with a 1.2 s wait: an unsliced BLPOP would time out the socket.
    from redlock_deco import register_provider

    register_provider("default", server.client(socket_timeout=0.4))
    release = threading.Event()
    t = hold_in_thread("long", release)
    threading.Timer(1.2, release.set).start()

    @locked("long", wait=None)
    def f() -> str:
        return "got it"

    started = time.monotonic()
    assert f() == "got it"
    assert 1.1 < time.monotonic() - started < 2.0
    t.join(5)


def test_other_threads_are_excluded(r: redis.Redis) -> None:
    inside = 0
    peak = 0
    guard = threading.Lock()

    @locked("excl", wait=10)
    def critical() -> None:
        nonlocal inside, peak
        with guard:
            inside += 1
            peak = max(peak, inside)
        time.sleep(0.005)
        with guard:
            inside -= 1

    threads = [threading.Thread(target=lambda: [critical() for _ in range(10)]) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert peak == 1
    assert r.dbsize() == 0


def test_metadata_and_signature_are_preserved() -> None:
    @locked("m:{a}")
    def documented(a: int, b: str = "x") -> int:
        """Docstring."""
        return a

    assert documented.__name__ == "documented"
    assert documented.__doc__ == "Docstring."
    assert str(inspect.signature(documented)) == "(a: 'int', b: 'str' = 'x') -> 'int'"
    assert documented(3) == 3


def test_generators_are_refused_at_decoration() -> None:
    with pytest.raises(TypeError, match="generator"):

        @locked("g")
        def gen() -> Iterator[int]:
            yield 1

    with pytest.raises(TypeError, match="generator"):

        @locked("g")
        async def agen() -> Any:
            yield 1


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"ttl": 0}, ValueError, "ttl"),
        ({"wait": -1}, ValueError, "wait"),
        ({"on_busy": "ignore"}, ValueError, "on_busy"),
        ({"ttl": None}, TypeError, "ttl"),
        ({"prefix": 3}, TypeError, "prefix"),
    ],
)
def test_bad_options_fail_at_decoration(
    kwargs: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match=fragment):
        locked("x", **kwargs)


def test_name_given_twice_or_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="once"):
        locked("a", name="b")
    with pytest.raises(TypeError, match="lock name"):
        locked(42)  # type: ignore[call-overload]


def test_provider_is_resolved_lazily_at_call_time() -> None:
    @locked("lazy", provider="later")
    def f() -> str:
        return "ok"

    from redlock_deco import ProviderNotFound, register_provider

    with pytest.raises(ProviderNotFound, match="'later'"):
        f()
    import redlock_deco.providers as providers

    register_provider("later", providers._sources["default"])
    assert f() == "ok"
