"""What a Redis key or value of ours is: a lease, a lease's bookkeeping, a lock token.

Read by the operator tools (``inspect``, force release) and by ``Lock.force_release``; only
``_protocol`` (key layout) below it. Holders are shown as ``host:pid``, never the secret part
of a token.
"""

from __future__ import annotations

import re

from ._protocol import SUFFIXES, hash_tag, sibling

# See _tokens.py; a reader's token ends in "/r" (_protocol.READER_SUFFIX).
TOKEN = re.compile(r"(?P<holder>.+:[0-9]+):[0-9a-f]{8}:[0-9a-f]{32}(?:/r)?")
REDIS_PY_TOKEN = re.compile(r"[0-9a-f]{32}")  # redis-py's Lock: uuid.uuid1().hex
SIBLINGS = tuple(f":{suffix}" for suffix in SUFFIXES)
ROLES = {
    "queue": "waiter queue",
    "limit": "semaphore limit",
    "fence": "fencing counter",
    "readers": "readers (shared holders)",
}


def decoded(raw: bytes | str) -> str:
    return raw if isinstance(raw, str) else raw.decode("utf-8", errors="backslashreplace")


def holder_in(raw: bytes | str) -> str | None:
    found = TOKEN.fullmatch(decoded(raw))
    return found.group("holder") if found else None


def is_lock_token(raw: bytes | str) -> bool:
    """Is ``raw`` a lock's token: ours, or redis-py's ``Lock``'s (what
    ``lua/force_release.lua`` accepts without ``force``)?"""
    return holder_in(raw) is not None or REDIS_PY_TOKEN.fullmatch(decoded(raw)) is not None


def lease_of(key: str) -> tuple[str, str] | None:
    """``(lease key, suffix)`` if ``key`` is a lease key's bookkeeping as :func:`sibling`
    names it (``{lock:x}:queue``, ``lock:{t}:fence``, ``{s12}:lock:a}b:limit``), else None."""
    for suffix in SUFFIXES:
        stem = key.removesuffix(f":{suffix}")
        if stem == key or hash_tag(key) is None:
            continue
        # The lease key after a slot's tag ({sN}:K), inside the tag ({K}), or before the
        # suffix (K:suffix, K with a tag of its own): the first that names ``key`` back.
        inner = (stem.partition("}:")[2], stem[1:-1]) if stem.startswith("{") else ()
        for lease in (*inner, stem):
            if lease and sibling(lease, suffix) == key:
                return lease, suffix
    return None


def bookkeeping(key: str) -> str | None:
    """Why ``key`` is no lease to force-release (it is one's bookkeeping), or None."""
    found = lease_of(key)
    if found is None:
        return None
    lease, suffix = found
    return (
        f"{key!r} is the {ROLES[suffix]} of {lease!r}, not a lock or semaphore: nothing was "
        f"removed (release {lease!r} instead)"
    )


def not_a_lock(key: str) -> str:
    """Why a string that holds no lock token is refused."""
    return (
        f"{key!r} holds a string that is no lock token (neither redlock-deco's nor redis-py "
        "Lock's), perhaps an application's value: nothing was removed (force=True, or "
        "--force on the command line, removes it anyway)"
    )


def wrong_type(key: str, kind: str, found: str) -> str:
    """Why ``key`` (``found``: "string", "zset" or "other") is no ``kind`` ("" for either)."""
    if kind == "semaphore" and found == "string":
        what = "a lock, not a semaphore: use Lock.force_release for it"
    elif kind == "lock" and found == "zset":
        what = "a sorted set (a semaphore's?), not a lock: use Semaphore.force_release for it"
    elif found == "zset":
        what = "a sorted set whose members are not redlock-deco tokens, so no semaphore"
    else:  # the script cannot name other types (TYPE is not in the least-privilege ACL)
        what = "neither a lock nor a semaphore (not a string or a sorted set)"
    return f"{key!r} holds {what}; nothing was removed (`redlock-deco inspect` lists what is held)"


def foreign(raw: bytes | str) -> str:
    """A token that is not ours, for display: its first characters only (a token is what
    releases a lock)."""
    return f"{decoded(raw)[:6]}... (not a redlock-deco token)"


def shown(raw: bytes | str) -> str:
    """Any token, for display: ``host:pid`` of ours (never the secret part), else cut short."""
    return holder_in(raw) or foreign(raw)
