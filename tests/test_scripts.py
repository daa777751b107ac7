"""Every Lua script ships in the installed package with its contract header, and answers
with the codes of the one reply table on a real server."""

from __future__ import annotations

from importlib import resources

import pytest
import redis

from redlock_deco import scripts

LUA = resources.files("redlock_deco").joinpath("lua")
NAMES = sorted(p.name.removesuffix(".lua") for p in LUA.iterdir() if p.name.endswith(".lua"))


@pytest.mark.parametrize("name", NAMES)
def test_script_has_contract_header_and_runs(name: str, r: redis.Redis) -> None:
    text = LUA.joinpath(f"{name}.lua").read_text("utf-8")
    header = text.split("\n\n", 1)[0]
    if name != "waiters":  # the shared fragment, included by the others
        assert "KEYS[1]" in header and "ARGV[1]" in header and "returns" in header
        script = scripts.load(name)
        assert r.script_load(script.source) == script.sha  # valid Lua, loadable


def test_lock_scripts_reply_codes(r: redis.Redis) -> None:
    keys = ("lock:s", "{lock:s}:waiters", "{lock:s}:signal")
    acquire, release, extend = (scripts.LOCK_ACQUIRE, scripts.LOCK_RELEASE, scripts.LOCK_EXTEND)
    assert r.eval(acquire.source, 3, *keys, "t1", 5000, 0) == [1, 5000]
    code, left = r.eval(acquire.source, 3, *keys, "t2", 5000, 3000)
    assert code == 0 and 4000 < left <= 5000
    assert r.exists("{lock:s}:waiters")  # t2 registered as a waiter
    assert r.eval(extend.source, 1, "lock:s", "t2", 9000) == 0
    assert r.eval(extend.source, 1, "lock:s", "t1", 9000) == 1
    assert r.eval(release.source, 3, *keys, "t2") == 0
    assert r.eval(release.source, 3, *keys, "t1") == 1
    assert r.lrange("{lock:s}:signal", 0, -1) == [b"1"]  # one wake-up for the one waiter
    assert r.eval(acquire.source, 3, *keys, "t2", 5000, 3000) == [1, 5000]
    assert r.keys("*") == [b"lock:s"]  # the winner cleaned up waiter zset and signal
    assert all(r.pttl(k) > 0 for k in r.keys("*"))


def test_release_without_waiters_writes_no_signal(r: redis.Redis) -> None:
    keys = ("lock:q", "{lock:q}:waiters", "{lock:q}:signal")
    r.eval(scripts.LOCK_ACQUIRE.source, 3, *keys, "t", 5000, 3000)
    r.eval(scripts.LOCK_RELEASE.source, 3, *keys, "t")
    assert r.dbsize() == 0
