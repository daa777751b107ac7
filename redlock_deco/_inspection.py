"""``redlock-deco inspect``: the locks and semaphores held now on one Redis, and the throttles
in use.

Walks the keyspace with SCAN (never KEYS, which blocks the server), recognises locks (a string
holding one of our tokens), locks held shared (a string saying so, with its readers' sorted
set beside it), semaphores (a sorted set of tokens scored by lease end) and throttles (a
string ``gcra ...`` of the theoretical arrival time and the rate it was last used with; an
idle throttle has no key, so only those used within the last burst's worth of time show), and
reports each holder as ``host:pid`` -- never the secret part of its token. On a cluster or a
quorum, point it at each node in turn: SCAN sees one server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis

from ._keys import (
    SIBLINGS,
    bookkeeping,
    decoded,
    foreign,
    holder_in,
    is_lock_token,
    lease_of,
    not_a_lock,
    shown,
    wrong_type,
)
from ._protocol import LOCK, SEMAPHORE, SHARED, SHARED_VALUE, sibling


def describe_server(info: Mapping[str, Any]) -> str:
    """The server's product and version from INFO server: "Redis 7.0.15", "Valkey 9.1.2".

    Valkey reports ``redis_version:7.2.4`` for clients that compare versions, and its own
    name and version in ``server_name`` and ``valkey_version``; Redis has no ``server_name``.
    """
    name = str(info.get("server_name") or "redis")
    # Formatted, never split: redis-py parses INFO values, so "8.0" would come back a float.
    version = info.get(f"{name}_version", info.get("redis_version", "unknown version"))
    return f"{name.capitalize()} {version}"


def held(client: redis.Redis, pattern: str = "*") -> list[dict[str, Any]]:
    """Everything held now whose key matches ``pattern``, sorted by key."""
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    found: list[dict[str, Any]] = []
    for raw_key in client.scan_iter(match=pattern, count=1000):
        key = decoded(raw_key)
        if key.endswith(SIBLINGS) and lease_of(key) is not None:
            continue  # a lock's or semaphore's own bookkeeping, not a lease
        kind = decoded(client.type(raw_key))
        if kind == LOCK.redis_type:
            entry = _lock(client, raw_key, key, now_ms)
        elif kind == SEMAPHORE.redis_type:
            entry = _semaphore(client, raw_key, key, now_ms)
        else:
            entry = None
        if entry is not None:
            found.append(entry)
    return sorted(found, key=lambda entry: str(entry["key"]))


@dataclass(frozen=True, slots=True)
class Found:
    """What ``redlock-deco release`` found at a key, to show before removing it."""

    key: str
    entry: dict[str, Any] | None = None  # what is held, as held() lists it; None: nothing
    tokens: tuple[bytes | str, ...] = ()  # the holders' tokens as read (never shown)
    note: str = ""  # without an entry: why
    refused: bool = False  # the key holds something that is not ours to remove


def one(client: redis.Redis, key: str, force: bool = False) -> Found:
    """What ``key`` holds, with the tokens the removal must still find there: an entry as
    :func:`held` lists them (a redis-py Lock's token shown cut short; with ``force``, a
    string that is no lock token too, of kind "value"), or a sentence saying why there is
    none."""
    why = bookkeeping(key)
    if why is not None:
        return Found(key, note=why, refused=True)
    kind = decoded(client.type(key))
    if kind == LOCK.redis_type:
        value = client.get(key)
        if value is not None and decoded(value) == SHARED_VALUE:
            seconds, micros = client.time()
            entry, tokens = _shared(client, key, seconds * 1000 + micros // 1000, every=True)
            if entry is not None:
                return Found(key, entry, tokens)
            return Found(key, note=f"{key}: nothing held (its readers' leases have ended)")
        if value is not None:
            recognised = is_lock_token(value)
            if not recognised and not force:
                return Found(key, note=not_a_lock(key), refused=True)
            lock = _lock_entry(key, shown(value), int(client.pttl(key)))
            lock["kind"] = LOCK.name if recognised else "value"
            return Found(key, lock, (value,))
    elif kind == SEMAPHORE.redis_type:
        members = cast(list[tuple[bytes, float]], client.zrange(key, 0, -1, withscores=True))
        seconds, micros = client.time()
        entry = _semaphore_entry(client, key, members, seconds * 1000 + micros // 1000, True)
        if entry is None:
            return Found(key, note=wrong_type(key, "", "zset"), refused=True)
        return Found(key, entry, tuple(member for member, _ends in members))
    elif kind != "none":
        return Found(key, note=wrong_type(key, "", "other"), refused=True)
    return Found(key, note=f"{key}: nothing held")


def _lock(client: redis.Redis, raw_key: bytes, key: str, now_ms: int) -> dict[str, Any] | None:
    value = client.get(raw_key)
    if isinstance(value, bytes) and value.startswith(THROTTLE_MARK):
        seconds, micros = client.time()
        return _throttle(value, key, seconds * 1_000_000 + micros)
    if value is not None and decoded(value) == SHARED_VALUE:
        return _shared(client, key, now_ms)[0]
    holder = holder_in(value) if isinstance(value, bytes) else None
    if holder is None:
        return None
    return _lock_entry(key, holder, int(client.pttl(raw_key)))


def _shared(
    client: redis.Redis, key: str, now_ms: int, every: bool = False
) -> tuple[dict[str, Any] | None, tuple[bytes, ...]]:
    """A lock held shared: its live readers (``every``: ended leases too), and their tokens."""
    members = cast(
        list[tuple[bytes, float]], client.zrange(sibling(key, "readers"), 0, -1, withscores=True)
    )
    holders = [
        {
            "holder": holder_in(member) or foreign(member),
            "remaining": max(0.0, (ends - now_ms) / 1000),
        }
        for member, ends in members
        if ends > now_ms or every
    ]
    if not holders:
        return None, ()
    entry = {
        "kind": SHARED.name,
        "key": key,
        "holders": holders,
        "slots": len(holders),
        "limit": None,
    }
    return entry, tuple(member for member, _ends in members)


def _lock_entry(key: str, holder: str, ttl_ms: int) -> dict[str, Any]:
    return {
        "kind": LOCK.name,
        "key": key,
        "holders": [{"holder": holder, "remaining": ttl_ms / 1000 if ttl_ms >= 0 else None}],
        "slots": 1,
        "limit": 1,
    }


def _semaphore(client: redis.Redis, raw_key: bytes, key: str, now_ms: int) -> dict[str, Any] | None:
    members = cast(list[tuple[bytes, float]], client.zrange(raw_key, 0, -1, withscores=True))
    return _semaphore_entry(client, key, members, now_ms)


def _semaphore_entry(
    client: redis.Redis,
    key: str,
    members: list[tuple[bytes, float]],
    now_ms: int,
    every: bool = False,
) -> dict[str, Any] | None:
    """A semaphore's live holders (``every``: ended leases too, with 0 left)."""
    holders = []
    for member, ends in members:
        holder = holder_in(member)
        if holder is None:
            return None  # not one of ours
        if ends > now_ms or every:
            holders.append({"holder": holder, "remaining": max(0.0, (ends - now_ms) / 1000)})
    if not holders:
        return None
    limit = client.get(sibling(key, "limit"))
    return {
        "kind": SEMAPHORE.name,
        "key": key,
        "holders": holders,
        "slots": len(holders),
        "limit": int(limit) if limit is not None else None,
    }


THROTTLE_MARK = b"gcra "


def _throttle(value: bytes, key: str, now_us: int) -> dict[str, Any] | None:
    """A throttle (lua/throttle_admit.lua): its rate and burst as last used, how far away the
    first moment is when a call of cost 1 would start at once (0: now), and how much is
    reserved ahead of now."""
    try:
        tat, base, _token, interval, burst = value.split()[1:6]
        arrival = float(tat) + float(base)
        every, most = float(interval), float(burst)
    except ValueError:  # too few fields, or no numbers: not one of ours
        return None
    if every <= 0:
        return None
    ahead = max(0.0, arrival - now_us)
    return {
        "kind": "throttle",
        "key": key,
        "holders": [],
        "slots": None,
        "limit": None,
        "rate": 1e6 / every,  # per second
        "burst": most,
        # When a call of cost 1 could start at once: its own interval on from the arrival
        # time, less the burst (review 8, t05: without its interval, "free now" was shown
        # while calls were refused for a whole interval).
        "next_free": max(0.0, arrival + every - most * every - now_us) / 1e6,  # seconds
        "reserved": ahead / every,  # calls' worth of slots taken ahead of now
    }


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` for a terminal: every character Python's repr would escape, escaped alike.

    Key names come from call arguments (``"ticket:{title}"``): printed raw, a newline forged
    a table row and ANSI escapes reached the operator's terminal (b06). JSON output needs
    none of this: ``json.dumps`` escapes control characters itself.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def render_json(entries: list[dict[str, Any]]) -> str:
    return json.dumps(entries, indent=2)


def render_table(entries: list[dict[str, Any]]) -> str:
    if not entries:
        return "nothing is held"
    rows = [("KIND", "KEY", "HOLDER (host:pid)", "REMAINING", "SLOTS")]
    for entry in entries:
        if entry["kind"] == "throttle":
            rows.append(_throttle_row(entry))
            continue
        limit = entry["limit"] if entry["limit"] is not None else "?"
        slots = f"{entry['slots']}/{limit}"
        if entry["kind"] == SHARED.name:
            slots = f"{entry['slots']} reader{'s' if entry['slots'] != 1 else ''}"
        for index, holder in enumerate(entry["holders"]):
            remaining = holder["remaining"]
            rows.append(
                (
                    entry["kind"] if index == 0 else "",
                    printable(entry["key"]) if index == 0 else "",
                    printable(holder["holder"]),
                    "no expiry" if remaining is None else f"{remaining:.1f}s",
                    slots if index == 0 else "",
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _throttle_row(entry: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """A throttle's row: no holder; when the next call could start at once, and its terms."""
    free = entry["next_free"]
    return (
        "throttle",
        printable(entry["key"]),
        "-",
        "free now" if free <= 0 else f"next slot {free:.1f}s",
        f"{entry['rate']:g}/s, burst {entry['burst']:g}, {entry['reserved']:.1f} reserved",
    )
