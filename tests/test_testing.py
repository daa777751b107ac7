"""The RedisServer helper itself: a real process, paused, killed and restarted by PID."""

from __future__ import annotations

import os

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlock_deco.testing import ENV_BINARY, RedisServer, find_redis_server


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


def test_binary_is_chosen_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BINARY, "no-such-redis-server-binary")
    with pytest.raises(RuntimeError, match=ENV_BINARY):
        find_redis_server()
