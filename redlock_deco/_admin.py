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

On a quorum the script runs on every master; a master that does not answer is reported
(``Released.unreachable``), and fewer answering than a majority raises the error: the lease
might then still hold on a quorum of masters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import _drivers as drivers
from . import _providers as providers
from . import _scripts as scripts
from ._errors import LockError
from ._guard import add_note
from ._inspection import shown
from ._naming import bounded
from ._protocol import HANDOFF_MS, Eval, Fanout, Steps, sibling
from ._scripts import Outcome

KINDS = ("lock", "semaphore")


@dataclass(frozen=True, slots=True)
class Released:
    """What a force release removed from one key.

    ``kind`` is ``"lock"`` or ``"semaphore"`` (``""`` when nothing was held); ``holders`` the
    removed holders as ``(holder, seconds of lease they had left)`` -- the holder is
    ``host:pid`` (never a token's secret part), the seconds ``None`` for a key without expiry;
    ``handed_to`` the waiters (``host:pid``) that now hold it, served in arrival order;
    ``unreachable`` the quorum masters that did not answer.
    """

    key: str
    kind: str
    holders: tuple[tuple[str, float | None], ...] = ()
    handed_to: tuple[str, ...] = ()
    unreachable: int = 0

    @property
    def removed(self) -> bool:
        """True if anything was held (and is not any more)."""
        return bool(self.holders)

    def __str__(self) -> str:
        if not self.removed:
            return f"{self.key}: nothing held"
        held = ", ".join(f"{holder} ({_left(seconds)})" for holder, seconds in self.holders)
        text = f"{self.key}: removed {self.kind} held by {held}"
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


def force_release(key: str, kind: str, *, counted: bool, masters: int) -> Steps[Released]:
    """Remove ``key`` (``kind`` "lock", "semaphore", or "" for whichever it is) and serve its
    waiters; on ``masters`` > 1, on every master of a quorum."""
    step = Eval(
        scripts.FORCE_RELEASE,
        (key, sibling(key, "queue"), sibling(key, "limit")),
        (HANDOFF_MS, int(counted), kind),
    )
    replies: list[Any] = [(yield step)] if masters == 1 else (yield Fanout(step))
    return merge(key, kind, replies)


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
    found = ""
    for reply in replies:
        if isinstance(reply, BaseException):
            continue
        outcome = scripts.outcome("force_release", reply[0])
        if outcome is Outcome.WRONG_TYPE:
            raise _wrong_type(key, kind, _text(reply[1]))
        if outcome is Outcome.GONE:
            continue
        found = _text(reply[1])
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
    )


def _wrong_type(key: str, kind: str, found: str) -> LockError:
    if kind == "semaphore" and found == "string":
        what = "a lock, not a semaphore: use Lock.force_release for it"
    elif kind == "lock" and found == "zset":
        what = "a sorted set (a semaphore's?), not a lock: use Semaphore.force_release for it"
    elif found == "zset":
        what = "a sorted set whose members are not redlock-deco tokens, so no semaphore"
    else:  # the script cannot name other types (TYPE is not in the least-privilege ACL)
        what = "neither a lock nor a semaphore (not a string or a sorted set)"
    return LockError(
        f"{key!r} holds {what}; nothing was removed (`redlock-deco inspect` lists what is held)",
        name=key,
        key=key,
    )


def _steps(target: Any, key: str, kind: str) -> Steps[Released]:
    masters = getattr(target.algorithms, "masters", 1)
    return force_release(key, kind, counted=getattr(target, "counted", True), masters=masters)


def key_of(name: object, prefix: object, provider: object) -> str:
    """The key ``force_release(name, prefix=...)`` removes: the one a ``Lock(name)`` takes."""
    for option, value in (("name", name), ("prefix", prefix), ("provider", provider)):
        if not isinstance(value, str):
            raise TypeError(f"force_release: {option} must be a str, got {value!r:.80}")
    return str(prefix) + bounded(str(name))


def release_sync(kind: str, name: str, prefix: str, provider: str) -> Released:
    """Force-release a lock or semaphore through the sync client(s) of ``provider``."""
    key = key_of(name, prefix, provider)
    target = providers.sync_target(provider)
    return drivers.run(_steps(target, key, kind), target)


async def release_async(kind: str, name: str, prefix: str, provider: str) -> Released:
    """Force-release a lock or semaphore through the asyncio client(s) of ``provider``."""
    key = key_of(name, prefix, provider)
    target = providers.async_target(provider)
    return await drivers.run_async(_steps(target, key, kind), target)


def release_on(client: Any, key: str) -> Released:
    """Force-release ``key``, whichever kind it is, on one sync client (the CLI's)."""
    target = drivers.SyncTarget(client)
    return drivers.run(force_release(key, "", counted=target.counted, masters=1), target)
