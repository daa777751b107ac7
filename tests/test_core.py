"""The protocol core driven step by step with scripted replies and a fake clock: the waiting
arithmetic is deterministic here. (Behaviour against a real server is in the other files.)"""

from __future__ import annotations

from typing import Any

import pytest

from redlock_deco import protocol, scripts
from redlock_deco.protocol import Block, Claim, Eval, Keys, Sleep
from redlock_deco.scripts import ScriptReplyError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def claim(signal: bool = True) -> Claim:
    keys = Keys.for_key("lock:k")
    if not signal:
        keys = Keys(keys.key, keys.waiters, None)
    return Claim(protocol.LOCK, keys, "tok", 30_000)


def drive(
    steps: Any, replies: list[Any], clock: Clock, advance: dict[type, float]
) -> tuple[list[Any], Any]:
    """Feed ``replies`` in order; each step moves the fake clock by ``advance[type]``."""
    seen = []
    try:
        step = next(steps)
        for reply in replies:
            seen.append(step)
            clock.now += advance.get(type(step), 0.0)
            step = steps.send(reply)
    except StopIteration as done:
        return seen, done.value
    raise AssertionError(f"algorithm still running after all replies; next step {step!r}")


def test_keys_share_the_lock_keys_hash_slot() -> None:
    keys = Keys.for_key("lock:order:7")
    assert keys.waiters == "{lock:order:7}:waiters" and keys.signal == "{lock:order:7}:signal"
    tagged = Keys.for_key("lock:{user1}:x")
    assert tagged.waiters == "lock:{user1}:x:waiters"
    assert protocol.hash_tag(tagged.signal or "") == "user1"
    assert protocol.hash_tag("a{}b") is None


@pytest.mark.parametrize("key", ["lock:a}b", "lock:cfg:{}", "lock:}{", "lock:x{}y}"])
def test_waiter_keys_share_the_slot_even_for_keys_with_a_stray_brace(key: str) -> None:
    from redis.crc import key_slot

    keys = Keys.for_key(key)
    assert {key_slot(k.encode()) for k in (key, keys.waiters, keys.signal or "")} == {
        key_slot(key.encode())
    }


def test_acquire_first_try() -> None:
    clock = Clock()
    steps, result = drive(protocol.SINGLE.acquire(claim(), 10, 2.0, clock), [[1, 30000]], clock, {})
    assert result == protocol.Granted()
    assert isinstance(steps[0], Eval) and steps[0].args == ("tok", 30000, 3000, 1)


def test_try_once_neither_registers_nor_blocks() -> None:
    clock = Clock()
    steps, result = drive(protocol.SINGLE.acquire(claim(), 0, 2.0, clock), [[0, 5000]], clock, {})
    assert result == protocol.NotGranted()
    assert len(steps) == 1 and steps[0].args[2] == 0  # window 0: never joins the waiters


def test_block_is_bounded_by_lease_left_deadline_and_slice() -> None:
    clock = Clock()
    replies = [[0, 300], None, [0, 20_000], None, [0, 20_000], None, [0, 20_000], None]
    steps, result = drive(protocol.SINGLE.acquire(claim(), 5.0, 2.0, clock), replies, clock,
                          {Block: 2.0})  # fmt: skip
    blocks = [s for s in steps if isinstance(s, Block)]
    assert blocks[0].timeout == pytest.approx(0.302)  # holder's lease ends in 300 ms
    assert blocks[1].timeout == pytest.approx(2.0)  # sliced below the socket timeout
    assert blocks[2].timeout == pytest.approx(1.0)  # what is left of the 5 s wait
    assert result == protocol.NotGranted()
    assert steps[-1].script is scripts.WAITER_LEAVE  # gave up: leaves the waiter zset


def test_a_wake_up_at_the_deadline_still_gets_its_attempt() -> None:
    clock = Clock()
    replies = [[0, 20_000], None, [1, 30000]]
    _, result = drive(protocol.SINGLE.acquire(claim(), 1.0, 2.0, clock), replies, clock,
                          {Block: 1.0})  # fmt: skip
    assert result == protocol.Granted()


def test_never_expiring_holder_blocks_in_slices_forever_with_wait_none() -> None:
    clock = Clock()
    replies = [[0, -1], None] * 50 + [[1, 30000]]
    steps, result = drive(protocol.SINGLE.acquire(claim(), None, 2.0, clock), replies, clock,
                          {Block: 2.0})  # fmt: skip
    assert result == protocol.Granted()
    assert {s.timeout for s in steps if isinstance(s, Block)} == {2.0}


def test_backoff_fallback_without_a_signal_list() -> None:
    clock = Clock()
    replies = [[0, 10_000], None, [0, 10_000], None, [0, 10_000], None, [1, 30000]]
    steps, result = drive(
        protocol.SINGLE.acquire(claim(signal=False), 5.0, 2.0, clock, rand=lambda: 1.0),
        replies, clock, {Sleep: 0.0},
    )  # fmt: skip
    sleeps = [s.seconds for s in steps if isinstance(s, Sleep)]
    assert result == protocol.Granted() and sleeps == [
        0.01,
        0.02,
        0.04,
    ]  # growing, jittered (rand=1)
    assert all(s.args[2] == 0 for s in steps if isinstance(s, Eval))  # no waiter entries


def test_release_and_extend_outcomes() -> None:
    clock = Clock()
    assert drive(protocol.SINGLE.release(claim()), [1], clock, {})[1] is True
    assert drive(protocol.SINGLE.release(claim()), [0], clock, {})[1] is False
    assert drive(protocol.SINGLE.extend(claim(), 5000), [1], clock, {})[1] is True
    assert drive(protocol.SINGLE.extend(claim(), 5000), [0], clock, {})[1] is False


@pytest.mark.parametrize("reply", [7, b"1", None, -1])
def test_unknown_reply_codes_are_errors_not_false(reply: object) -> None:
    with pytest.raises(ScriptReplyError, match="unexpected reply"):
        drive(protocol.SINGLE.release(claim()), [reply], Clock(), {})
