"""A block whose exit never ran: a KeyboardInterrupt at the first instruction of
``__exit__``, where a signal can be raised and no handler of ours can run yet (review 40, 1).

A block dropped with its object is closed by its finalizer; an object that outlives its
blocks -- ``LOCK = Lock(...)``, then ``with LOCK:`` in a loop or in a function called again
and again -- kept the block open: its lease was renewed for as long as the thread lived,
later blocks re-entered it without a round trip, and every other thread and process waited
forever (or, once that lease ended, every later block on the name raised LockLost). The next
``with`` statement on the object closes such a block first.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest
import redis

from redlock_deco import Lock, Semaphore
from redlock_deco._primitive import Primitive

KINDS: dict[str, Callable[[], Any]] = {
    "lock": lambda: Lock("long-lived", ttl=5),
    "semaphore": lambda: Semaphore("long-lived", limit=1, ttl=5),
    "reader": lambda: Lock("long-lived", ttl=5, shared=True),
}


class Interrupted(KeyboardInterrupt):
    pass


EXIT_CODE = Primitive.__dict__["__exit__"].func.__code__  # (an ownership.ExitHook)


def interrupt_exit_once() -> Iterator[None]:
    """Raise a KeyboardInterrupt as the next ``__exit__`` of a primitive is called (a trace
    function's 'call' event: before the function's first line, as a signal at its start)."""
    fired = False

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal fired
        if event == "call" and not fired and frame.f_code is EXIT_CODE:
            fired = True
            raise Interrupted
        return None

    sys.settrace(tracer)
    threading.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
    assert fired


def free_to_others(r: redis.Redis, make: Callable[[], Any]) -> bool:
    """Whether another thread gets the name at once (and the server holds nothing after)."""
    got: list[bool] = []

    def other() -> None:
        other_lock = make()
        with other_lock:
            got.append(True)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(5)
    return got == [True] and not r.keys("*long-lived*")


def leave_by_interrupt(lock: Any) -> None:
    gen = interrupt_exit_once()
    next(gen)
    try:
        with lock:
            pass
    except Interrupted:
        pass
    finally:
        gen.close()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_same_statement_again_closes_the_block_whose_exit_never_ran(
    r: redis.Redis, kind: str
) -> None:
    lock = KINDS[kind]()
    for attempt in range(2):
        if attempt == 0:
            gen = interrupt_exit_once()
            next(gen)
        try:
            with lock:
                if attempt == 0:
                    held = r.keys("*long-lived*")
        except Interrupted:
            gen.close()
    assert held
    assert not lock._blocks
    assert free_to_others(r, KINDS[kind])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_block_in_a_function_called_again_closes_the_one_whose_exit_never_ran(
    r: redis.Redis, kind: str
) -> None:
    lock = KINDS[kind]()

    def work(depth: int) -> None:
        if depth:  # another frame, at another depth: not the same frame recycled
            work(depth - 1)
            return
        with lock:
            pass

    leave_by_interrupt(lock)
    assert lock._blocks and r.keys("*long-lived*")  # the block stayed open
    work(3)
    assert not lock._blocks
    assert free_to_others(r, KINDS[kind])


def test_a_block_whose_exit_never_ran_and_whose_lease_then_ended_poisons_nothing(
    r: redis.Redis,
) -> None:
    """Review 40's variant: the open block's lease ended (here deleted, as a force release or
    an eviction would); every later block on the name raised LockLost, through any object."""
    lock = KINDS["lock"]()
    leave_by_interrupt(lock)
    r.delete(*r.keys("*long-lived*"))
    with lock:
        assert r.keys("*long-lived*")
    with Lock("long-lived", ttl=5):
        pass
    assert not lock._blocks and not r.keys("*long-lived*")


def test_a_nested_block_on_the_same_object_is_no_unexited_one(r: redis.Redis) -> None:
    """What must stay: a block nested in an open one (another statement, or the same one in
    a recursive call) re-enters it and closes nothing."""
    lock = KINDS["lock"]()

    def nest(depth: int) -> None:
        with lock:
            assert len(lock._blocks) == 3 - depth
            if depth:
                nest(depth - 1)

    with lock:
        nest(1)
        assert len(lock._blocks) == 1
    assert not r.keys("*long-lived*")
