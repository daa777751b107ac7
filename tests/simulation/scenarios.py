"""Directed scenarios: short, hand-written command sequences of the package's scripts on the
simulated store (its real Lua, a virtual clock held still or moved to the millisecond), for
branches the seeded schedules reach too rarely to rely on -- or under conditions they do not
draw (a cluster, where PUBLISH counts prove nothing; a copy of a command delayed past its own
retry). Arguments come from the production step builders (``Claim.acquire_step`` and the
others), so they follow every change of the protocol.

Each scenario takes an optional script ``transform`` (a mutant's, see :mod:`.mutants`) and
raises ``AssertionError`` if the scripts go wrong. ``test_simulation`` runs every one on the
unmutated scripts, and checks that each kills the mutant that names it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redlock_deco import _protocol as protocol

from . import throttle
from .store import Store

Transform = Callable[[str], str] | None

T0 = 1_700_000_000_000_000  # the server's clock at the start, in microseconds (ms-aligned)


class Server:
    """A simulated store whose clock the scenario moves."""

    def __init__(self, transform: Transform) -> None:
        self.now = T0
        self.store = Store(lambda: self.now, lambda channel, message: 1, lambda channel: 1,
                           transform)  # fmt: skip

    def step(self, step: protocol.Eval | protocol.Call) -> Any:
        if isinstance(step, protocol.Call):
            return self.store.execute(step.args)
        keys, args = step.keys, step.args
        return self.store.execute(("EVAL", step.script.source, len(keys), *keys, *args))

    def queue(self, claim: protocol.Claim) -> list[bytes]:
        reply: list[bytes] = self.store.execute(("ZRANGE", claim.keys.queue, 0, -1))
        return reply

    def advance_ms(self, ms: int) -> None:
        self.now += ms * 1000


def claim(kind: protocol.Kind, name: str, token: str, ttl_ms: int, limit: int = 1,
          counted: bool = True) -> protocol.Claim:  # fmt: skip
    suffix = protocol.READER_SUFFIX if kind.shared else ""
    return protocol.Claim(kind, protocol.Keys.for_key(name, kind), f"scen:1:cafe:{token}{suffix}",
                          ttl_ms, limit, counted=counted)  # fmt: skip


def acquired(reply: Any) -> bool:
    return isinstance(reply, list) and reply[0] == 1


def ended_readers_free_the_lock(transform: Transform = None) -> None:
    """A writer asking in the last millisecond of a shared lock's key -- its readers' leases
    all ended (a sorted-set lease ends at its score), the key still alive (Redis expires a key
    only once the clock is *past* its expiry) -- takes the lock: it is free. (Without
    lock_acquire's sweep of ended readers it is told "busy, 0 ms left" by nobody.)"""
    server = Server(transform)
    reader = claim(protocol.SHARED, "scen:rw", "reader", 100)
    writer = claim(protocol.LOCK, "scen:rw", "writer", 1000)
    assert acquired(server.step(reader.acquire_step(protocol.TRY)))
    server.advance_ms(100)  # the reader's lease ends now; the key lives through this ms
    assert server.store.execute(("GET", "scen:rw")) == protocol.SHARED_VALUE.encode()
    reply = server.step(writer.acquire_step(protocol.TRY))
    assert acquired(reply), f"a writer is refused a lock whose readers all ended: {reply}"


def uncounted_semaphore_admission_leaves_the_queue(transform: Transform = None) -> None:
    """On a cluster (PUBLISH counts prove nothing, so a free slot goes to whoever asks) a
    queued waiter can be admitted by its own attempt while a waiter with a smaller limit holds
    the head of the queue: its entry must leave the queue with it, or a later serve admits it
    again after it released -- a slot held by nobody for a whole ttl."""
    server = Server(transform)
    sem = "scen:sem"
    first = claim(protocol.SEMAPHORE, sem, "h1", 60_000, limit=2, counted=False)
    second = claim(protocol.SEMAPHORE, sem, "h2", 60_000, limit=2, counted=False)
    strict = claim(protocol.SEMAPHORE, sem, "w1", 60_000, limit=1, counted=False)
    waiter = claim(protocol.SEMAPHORE, sem, "w2", 60_000, limit=2, counted=False)
    assert acquired(server.step(first.acquire_step(protocol.TRY)))
    assert acquired(server.step(second.acquire_step(protocol.TRY)))
    assert not acquired(server.step(strict.acquire_step(protocol.QUEUE)))  # 2 hold: queued
    assert not acquired(server.step(waiter.acquire_step(protocol.QUEUE)))  # queued behind it
    assert server.step(second.release_step()) == 1  # the head (limit 1) stays held back
    assert acquired(server.step(waiter.acquire_step(protocol.AGAIN)))  # 1 < 2: in
    entries = [e.decode() for e in server.queue(waiter)]
    assert waiter.entry not in entries, f"admitted, {waiter.token} is still queued: {entries}"
    server.step(waiter.release_step())
    server.step(first.release_step())  # frees both slots: the queue is served
    holders = server.store.execute(("ZRANGE", sem, 0, -1))
    assert waiter.token.encode() not in holders, (
        f"{waiter.token} holds a slot again after releasing it: {holders}"
    )


def delayed_try_then_confirm_leaves_the_queue(transform: Transform = None) -> None:
    """A waiter's first attempt (the plain SET NX of the lean path) times out and the client's
    retry re-sends it: busy; the waiter queues. The first copy, delayed in the network on the
    connection the client gave up, lands later, after the holder's lease ended: it takes the
    lock, and leaves the queue entry (a plain SET knows no queue). The waiter's next attempt
    finds the lock its own and must take the entry out, or a release serves it again: the
    lock handed back to a waiter that no longer waits (or, while it holds, to itself)."""
    server = Server(transform)
    name = "scen:lock"
    holder = claim(protocol.LOCK, name, "holder", 100)
    waiter = claim(protocol.LOCK, name, "waiter", 1000)
    plain = waiter.plain_step()
    assert plain is not None
    assert acquired(server.step(holder.acquire_step(protocol.TRY)))
    assert server.step(plain) is None  # the retry's copy: busy
    assert not acquired(server.step(waiter.acquire_step(protocol.QUEUE)))
    server.advance_ms(101)  # the holder's lease ended (it crashed): nobody served the queue
    assert server.step(plain) == b"OK"  # the delayed first copy lands; its reply is lost
    assert acquired(server.step(waiter.acquire_step(protocol.AGAIN)))  # the waiter asks again
    entries = [e.decode() for e in server.queue(waiter)]
    assert waiter.entry not in entries, f"holding, {waiter.token} is still queued: {entries}"
    server.step(waiter.release_step())
    assert server.store.execute(("GET", name)) is None, "the release handed the lock back"


def moving_slot_tells_no_unwritten_grant(transform: Transform = None) -> None:
    """A cluster's slot being moved (Store.migrating, the scripts' cluster text): the last
    reader leaves -- emptying the readers' set, which the node then refuses to touch again
    -- with a reader queued (put there directly: the seeded schedules rarely leave a reader at
    the head as the last one leaves). The hand-off cannot write the reader's admission, so it
    must not tell it either: a reader told of a share the server does not list believes it
    holds while a writer takes the lock. The release itself runs to its end."""
    server = Server(transform)
    told: list[str] = []
    server.store.publish_hook = lambda channel, message: told.append(message) or 1
    name = "scen:moving"
    leaving = claim(protocol.SHARED, name, "leaving", 60_000, counted=False)
    queued = claim(protocol.SHARED, name, "queued", 60_000, counted=False)
    assert acquired(server.step(leaving.acquire_step(protocol.TRY)))
    server.store.execute(("ZADD", queued.keys.queue, "1", queued.entry))
    server.store.migrating = True
    reply = server.step(leaving.release_step())
    assert reply == 1, f"the last reader's release stopped half-way: {reply}"
    readers = server.store.execute(("ZRANGE", leaving.keys.readers, 0, -1))
    for message in told:
        token = message.split(" ")[0]
        assert token.encode() in (readers or []), f"{token} told of a share not written"


SCENARIOS: dict[str, Callable[[Transform], None]] = {
    f.__name__: f
    for f in (
        ended_readers_free_the_lock,
        uncounted_semaphore_admission_leaves_the_queue,
        delayed_try_then_confirm_leaves_the_queue,
        moving_slot_tells_no_unwritten_grant,
    )
}
# The throttle's own seeded schedules (simulation/throttle.py), as one scenario.
SCENARIOS["throttle"] = throttle.scenario
