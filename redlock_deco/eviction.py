"""The first use of a Redis target checks that the server will not evict lock keys.

Under memory pressure an ``allkeys-*`` policy evicts any key and a ``volatile-*`` policy any
key with an expiry -- every lock key has one -- so a held lock can vanish and a second holder
get in, with nothing to tell the first. Only ``noeviction`` (or a dedicated instance that
never fills up) keeps locks safe; see GUARANTEES.md. The check runs once per target, after
its first successful acquisition, in the background (so it never delays a lock call, nor a
failure), and logs one warning per server when the policy evicts. Servers that refuse CONFIG
(managed Redis, restrictive ACLs) are left alone: nothing can be learnt there, and a lock
call must not fail for it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from . import process

log = logging.getLogger("redlock_deco")

SAFE_POLICY = "noeviction"
_warned: set[str] = set()  # servers already warned about, once per process each


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
        "may evict lock keys, letting a second holder in. Use maxmemory-policy noeviction "
        "(or a dedicated instance) for locks; see GUARANTEES.md"
    )


def _clients(target: Any) -> list[Any]:
    nodes = getattr(target, "nodes", None)
    return [node.client for node in nodes] if nodes is not None else [target.client]


def start_check(target: Any) -> None:
    """Check the sync ``target`` on a short-lived thread: off the caller's path, so a slow
    or paused server (a quorum master) never delays a lock call for it."""
    target.checked = True
    threading.Thread(target=check, args=(target,), name="redlock-deco-check", daemon=True).start()


def start_check_async(target: Any) -> None:
    """Check the asyncio ``target`` in a background task of the running loop."""
    target.checked = True
    process.background(check_async(target), name="redlock-deco-check")


def check(target: Any) -> None:
    """Warn once if the sync ``target``'s server(s) may evict keys."""
    for client in _clients(target):
        try:
            reply = client.config_get("maxmemory-policy")
        except Exception:  # refused, unreachable, or the client closed under it: say nothing
            continue
        _warn(_policy(reply), client)


async def check_async(target: Any) -> None:
    """Warn once if the asyncio ``target``'s server(s) may evict keys."""
    for client in _clients(target):
        try:
            reply = await client.config_get("maxmemory-policy")
        except Exception:  # a best-effort warning must never fail anything
            continue
        _warn(_policy(reply), client)


def _warn(policy: str | None, client: Any) -> None:
    where = _where(client)
    message = warning_for(policy, where)
    if message is not None and where not in _warned:
        _warned.add(where)  # asyncio targets are per loop: the server is what counts
        log.warning(message)


def _where(client: Any) -> str:
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {}) or {}
    host, port = kwargs.get("host"), kwargs.get("port")
    return f"the Redis at {host}:{port}" if host else "the Redis server"
