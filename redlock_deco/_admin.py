"""Operator tools: remove a stuck lock or semaphore whoever holds it (``Lock.force_release``,
``Semaphore.force_release``, their asyncio twins, and ``redlock-deco release``).

Decision record -- what happens to the waiters. A force release is served as a *release*
would be (``lua/force_release.lua``): the lock goes straight to the oldest queued waiter that
still listens, a semaphore's slots to up to its limit of them, each woken up holding what it
waited for; with nobody to serve, the queue and limit keys go too. The alternative, waking
every waiter to race for a deleted key, was rejected: a waiter takes a PUBLISH of its token
as "you hold it" (that is the hand-off protocol, see ``_protocol.py``), so telling waiters to
retry would need a second kind of message, and a race would undo the arrival order the
queue keeps. Served this way the next holder starts at once, the order stands, and nothing
in the waiting algorithm changes. The fencing counter (``:fence``) stays: tokens must keep
rising across a force release.

The former holder finds out by itself: its next renewal (or extend, or release) compares its
token, finds another or none, and reports the lease lost -- ``on_lost`` and ``LockLost``, as
for any lease that expired under it.

Decision record -- what may be removed. Only what is a lease: a key named like one's
bookkeeping (``sibling``'s ``:queue``, ``:limit``, ``:fence``) is refused before anything is
sent, and a string holding no lock token (ours, or redis-py's ``Lock``'s ``uuid1().hex``) is
refused by the script unless ``force`` says the caller knows it is a lock: the key names an
operator types are full Redis keys, and ``session:abc`` must not go because it was mistyped.
``expect`` makes the removal conditional on who holds it: the operator confirmed removing
*those* holders, and one who released in the meantime must not cost the next holder its lease.

On a quorum the script runs on every master; a master that does not answer is reported
(``Released.unreachable``), and fewer answering than a majority raises the error: the lease
might then still hold on a quorum of masters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

from . import _drivers as drivers
from . import _providers as providers
from . import _scripts as scripts
from ._errors import LockError, add_note
from ._keys import bookkeeping, not_a_lock, shown, wrong_type
from ._naming import bounded
from ._protocol import HANDOFF_MS, Eval, Fanout, Steps, sibling
from ._scripts import Outcome

#: The holders a force release may remove: one token, several, or None for whoever holds it.
Expect: TypeAlias = "str | bytes | Iterable[str | bytes] | None"


@dataclass(frozen=True, slots=True)
class Released:
    """What a force release removed from one key.

    ``kind`` is ``"lock"`` or ``"semaphore"`` (``""`` when nothing was held); ``holders`` the
    removed holders as ``(holder, seconds of lease they had left)`` -- the holder is
    ``host:pid`` (never a token's secret part), the seconds ``None`` for a key without expiry;
    ``handed_to`` the waiters (``host:pid``) that now hold it, served in arrival order;
    ``unreachable`` the quorum masters that did not answer; ``changed`` who holds it now when
    that was not who ``expect`` named (then nothing was removed); ``recognised`` False when
    what was removed was a string holding no lock token (removed because of ``force``).
    """

    key: str
    kind: str
    holders: tuple[tuple[str, float | None], ...] = ()
    handed_to: tuple[str, ...] = ()
    unreachable: int = 0
    changed: tuple[str, ...] = ()
    recognised: bool = True

    @property
    def removed(self) -> bool:
        """True if anything was held (and is not any more)."""
        return bool(self.holders)

    def __str__(self) -> str:
        if self.changed and not self.removed:
            now = ", ".join(self.changed)
            return f"{self.key}: held by {now}, not as expected; nothing removed"
        if not self.removed:
            return f"{self.key}: nothing held"
        held = ", ".join(f"{holder} ({_left(seconds)})" for holder, seconds in self.holders)
        text = f"{self.key}: removed {self.kind} held by {held}"
        if not self.recognised:
            text = f"{self.key}: removed a string that is not a recognised lock, as forced: {held}"
        if self.handed_to:
            text += f"; handed to waiting {', '.join(self.handed_to)}"
        if self.unreachable:
            text += f"; {self.unreachable} master(s) did not answer"
        return text


def _left(seconds: float | None) -> str:
    if seconds is None:
        return "no expiry"
    return f"{seconds:.1f}s left" if seconds > 0 else "lease ended"


def _text(raw: Any) -> str:
    return raw if isinstance(raw, str) else bytes(raw).decode("utf-8", errors="backslashreplace")


def force_release(
    key: str, kind: str, *, counted: bool, masters: int, expect: Expect = None, force: bool = False
) -> Steps[Released]:
    """Remove ``key`` (``kind`` "lock", "semaphore", or "" for whichever it is) and serve its
    waiters; on ``masters`` > 1, on every master of a quorum. With ``expect``, only if every
    holder is one of those tokens; with ``force``, a string that holds no lock token too."""
    refused = bookkeeping(key)
    if refused is not None:
        raise LockError(refused, name=key, key=key)
    digests = digests_of(expect)
    compare = ("0",) if digests is None else ("1", *digests)
    step = Eval(
        scripts.FORCE_RELEASE.on(not counted),
        (key, *(sibling(key, suffix) for suffix in ("queue", "limit", "readers"))),
        (HANDOFF_MS, int(counted), kind, int(force), *compare),
    )
    replies: list[Any] = [(yield step)] if masters == 1 else (yield Fanout(step))
    return merge(key, kind, replies)


def digests_of(expect: Expect) -> tuple[str, ...] | None:
    """The SHA-1 (hex) of each expected token, as the script compares them: a value that is
    not UTF-8 (a forced one, read as bytes) arrives intact, and ARGV names no secret."""
    if expect is None:
        return None
    tokens = [expect] if isinstance(expect, (str, bytes)) else list(expect)
    for token in tokens:
        if not isinstance(token, (str, bytes)):
            raise TypeError(f"force_release: expect takes tokens (str or bytes), got {token!r:.80}")
    raw = (token.encode() if isinstance(token, str) else token for token in tokens)
    return tuple(hashlib.sha1(data, usedforsecurity=False).hexdigest() for data in raw)


def merge(key: str, kind: str, replies: list[Any]) -> Released:
    """One master's reply, or a quorum's (exceptions for masters that failed), as one result."""
    failed = [reply for reply in replies if isinstance(reply, BaseException)]
    if len(failed) > len(replies) // 2:
        error = failed[0]
        if len(replies) > 1:
            add_note(error, f"force release of {key!r} reached only {len(replies) - len(failed)}"
                     f" of {len(replies)} masters: it may still be held; run it again")  # fmt: skip
        raise error
    holders: dict[str, float | None] = {}
    served: dict[str, None] = {}
    changed: dict[str, None] = {}
    found = ""
    recognised = True
    for reply in replies:
        if isinstance(reply, BaseException):
            continue
        outcome = scripts.outcome("force_release", reply[0])
        if outcome is Outcome.WRONG_TYPE:
            raise LockError(wrong_type(key, kind, _text(reply[1])), name=key, key=key)
        if outcome is Outcome.NOT_A_LOCK:
            raise LockError(not_a_lock(key), name=key, key=key)
        if outcome is Outcome.CHANGED:
            changed.update(dict.fromkeys(shown(_text(token)) for token in reply[1]))
            continue
        if outcome is Outcome.GONE:
            continue
        found = _text(reply[1])
        recognised = recognised and int(reply[4]) == 1
        flat = reply[2]
        for token, ms in zip(flat[::2], flat[1::2], strict=True):
            seconds = None if int(ms) == -1 else int(ms) / 1000
            previous = holders.get(_text(token), 0.0)
            holders[_text(token)] = (
                None if seconds is None or previous is None else max(seconds, previous)
            )
        served.update(dict.fromkeys(_text(token) for token in reply[3]))
    return Released(
        key,
        found,
        tuple((shown(token), seconds) for token, seconds in holders.items()),
        tuple(shown(token) for token in served),
        len(failed),
        tuple(changed),
        recognised,
    )


def _steps(target: Any, key: str, kind: str, expect: Expect, force: bool) -> Steps[Released]:
    masters = getattr(target.algorithms, "masters", 1)
    counted = getattr(target, "counted", True)
    return force_release(key, kind, counted=counted, masters=masters, expect=expect, force=force)


def key_of(name: object, prefix: object, provider: object) -> str:
    """The key ``force_release(name, prefix=...)`` removes: the one a ``Lock(name)`` takes."""
    for option, value in (("name", name), ("prefix", prefix), ("provider", provider)):
        if not isinstance(value, str):
            raise TypeError(f"force_release: {option} must be a str, got {value!r:.80}")
    return str(prefix) + bounded(str(name))


def release_sync(
    kind: str, name: str, prefix: str, provider: str, expect: Expect = None, force: bool = False
) -> Released:
    """Force-release a lock or semaphore through the sync client(s) of ``provider``."""
    key = key_of(name, prefix, provider)
    target = providers.sync_target(provider)
    return drivers.run(_steps(target, key, kind, expect, force), target)


async def release_async(
    kind: str, name: str, prefix: str, provider: str, expect: Expect = None, force: bool = False
) -> Released:
    """Force-release a lock or semaphore through the asyncio client(s) of ``provider``."""
    key = key_of(name, prefix, provider)
    target = providers.async_target(provider)
    return await drivers.run_async(_steps(target, key, kind, expect, force), target)


def release_on(
    client: Any, key: str, *, counted: bool, expect: Expect = None, force: bool = False
) -> Released:
    """Force-release ``key``, whichever kind it is, on one sync client (the CLI's, which
    says whether PUBLISH counts prove a waiter gone there: not on a cluster node)."""
    steps = force_release(key, "", counted=counted, masters=1, expect=expect, force=force)
    target = drivers.SyncTarget(client)
    try:
        return drivers.run(steps, target)
    finally:
        target.retire()  # (its spare connections back to the client's pool; its own closed)
