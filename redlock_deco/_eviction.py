"""The first use of a Redis target checks that the server will not evict lock keys.

Under memory pressure an ``allkeys-*`` policy evicts any key and a ``volatile-*`` policy any
key with an expiry -- every lock key has one -- so a held lock can vanish and a second holder
get in, with nothing to tell the first (and a throttle's arrival time can vanish, letting a new
burst in: its first call checks too). Only ``noeviction`` (or a dedicated instance that
never fills up) keeps locks safe; see GUARANTEES.md. The check runs once per target, after
its first successful acquisition on a thread of its own (sync), or in line before the first
acquisition for at most 0.25 s (twice that if it must be stopped) once per server and process
(asyncio), and logs one warning per server when the policy evicts. Servers that refuse CONFIG
(managed Redis, restrictive ACLs) are left alone: nothing can be learnt there, and a lock
call must not fail for it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from ._protocol import Call
from ._worker import quiet, start

log = logging.getLogger("redlock_deco")

SAFE_POLICY = "noeviction"
_warned: set[str] = set()  # servers already warned about, once per process each
_checked: set[str] = set()  # servers whose policy was read (warned about or not)
# The in-line asyncio check waits this long at most (a slow or paused quorum master).
CHECK_TIMEOUT = 0.25


def _policy(reply: Any) -> str | None:
    """The policy out of a CONFIG GET reply (a dict, or a flat list on older clients)."""
    if isinstance(reply, dict):
        values = list(reply.values())
    elif isinstance(reply, (list, tuple)) and len(reply) >= 2:
        values = [reply[1]]
    else:
        return None
    value = values[0] if values else None
    return value.decode() if isinstance(value, bytes) else value


def warning_for(policy: str | None, where: str) -> str | None:
    """The warning to log for ``policy`` (None: nothing to say)."""
    if policy is None or policy == SAFE_POLICY:
        return None
    return (
        f"redlock-deco: {where} has maxmemory-policy {policy!r}: under memory pressure it "
        "may evict lock keys, letting a second holder in (or a throttle's, letting a new burst "
        "in). Use maxmemory-policy noeviction (or a dedicated instance) for locks; see "
        "GUARANTEES.md"
    )


# Sent as a protocol step, so it takes its place in the target's connection lanes (on a pool
# of one connection, a check beside the lanes made a waiter's command fail).
CONFIG_GET = Call(("CONFIG", "GET", "maxmemory-policy"))


def _nodes(target: Any) -> list[Any]:
    nodes = getattr(target, "nodes", None)
    return list(nodes) if nodes is not None else [target]


def start_check(target: Any) -> None:
    """Check the sync ``target`` on a short-lived thread: off the caller's path, so a slow
    or paused server (a quorum master) never delays a lock call for it."""
    target.checked = True
    start(threading.Thread(target=check, args=(target,), name="redlock-deco-check", daemon=True))


async def check_async_once(target: Any) -> None:
    """Check the asyncio ``target`` in line, bounded by CHECK_TIMEOUT, unless its servers
    were checked already (asyncio targets are per loop; servers are checked once per
    process)."""
    target.checked = True
    if all(_where(node.client) in _checked for node in _nodes(target)):
        return
    # Not asyncio.wait_for: on 3.10 it drops a cancellation that comes as the check ends, and
    # the acquire went on and ran its body in the cancelled task (review 30, 20 of 20; where
    # Task.cancelling() exists, the acquire notices). asyncio.wait raises it whatever ended.
    check = asyncio.ensure_future(check_async(target))
    check.add_done_callback(quiet)  # a best-effort warning never fails anything
    try:
        await asyncio.wait((check,), timeout=CHECK_TIMEOUT)
    finally:
        if not check.done():  # too slow, or the caller cancelled: say nothing
            check.cancel()
            # Its end awaited (briefly): a loop closed right after this call would otherwise
            # destroy it pending, with a warning on stderr.
            await asyncio.wait((check,), timeout=CHECK_TIMEOUT)


def check(target: Any) -> None:
    """Warn once if the sync ``target``'s server(s) may evict keys."""
    for node in _nodes(target):
        if _where(node.client) in _checked:
            continue
        try:
            reply = node.execute(CONFIG_GET)
        except Exception:  # refused, unreachable, or the client closed under it: say nothing
            continue
        _warn(_policy(reply), node.client)


async def check_async(target: Any) -> None:
    """Warn once if the asyncio ``target``'s server(s) may evict keys."""
    for node in _nodes(target):
        if _where(node.client) in _checked:
            continue
        try:
            reply = await node.execute(CONFIG_GET)
        except Exception:  # a best-effort warning must never fail anything
            continue
        _warn(_policy(reply), node.client)


def _warn(policy: str | None, client: Any) -> None:
    where = _where(client)
    _checked.add(where)
    message = warning_for(policy, where)
    if message is not None and where not in _warned:
        _warned.add(where)  # asyncio targets are per loop: the server is what counts
        log.warning(message)


def _where(client: Any) -> str:
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {}) or {}
    host, port = kwargs.get("host"), kwargs.get("port")
    return f"the Redis at {host}:{port}" if host else "the Redis server"
