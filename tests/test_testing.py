"""The RedisServer helper itself: a real process, paused, killed and restarted by PID."""

from __future__ import annotations

import os

import pytest
import redis

from redlock_deco.testing import ENV_BINARY, RedisServer, find_redis_server


def test_lifecycle() -> None:
    with RedisServer() as srv:
        pid = srv.pid
        client = srv.client(socket_timeout=0.3)
        assert client.ping()
        assert srv.url == f"redis://127.0.0.1:{srv.port}/0"
        srv.pause()
        with pytest.raises(redis.exceptions.TimeoutError):
            client.ping()
        srv.resume()
        assert srv.client().ping()
        srv.kill()
        with pytest.raises(redis.exceptions.ConnectionError):
            srv.client(socket_connect_timeout=0.5).ping()
        srv.restart()
        assert srv.pid != pid and srv.client().ping()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_binary_is_chosen_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BINARY, "no-such-redis-server-binary")
    with pytest.raises(RuntimeError, match=ENV_BINARY):
        find_redis_server()
