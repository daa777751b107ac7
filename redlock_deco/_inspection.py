"""``redlock-deco inspect``: the locks and semaphores held now on one Redis.

Walks the keyspace with SCAN (never KEYS, which blocks the server), recognises locks (a string
holding one of our tokens) and semaphores (a sorted set of tokens scored by lease end), and
reports each holder as ``host:pid`` -- never the secret part of its token. On a cluster or a
quorum, point it at each node in turn: SCAN sees one server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, cast

import redis

from ._protocol import hash_tag, sibling

TOKEN = re.compile(r"^(?P<holder>.+:\d+):[0-9a-f]{8}:[0-9a-f]{32}$")  # see _tokens.py
SIBLINGS = (":queue", ":limit")


def describe_server(info: Mapping[str, Any]) -> str:
    """The server's product and version from INFO server: "Redis 7.0.15", "Valkey 9.1.2".

    Valkey reports ``redis_version:7.2.4`` for clients that compare versions, and its own
    name and version in ``server_name`` and ``valkey_version``; Redis has no ``server_name``.
    """
    name = str(info.get("server_name") or "redis")
    # Formatted, never split: redis-py parses INFO values, so "8.0" would come back a float.
    version = info.get(f"{name}_version", info.get("redis_version", "unknown version"))
    return f"{name.capitalize()} {version}"


def _text(raw: bytes | str) -> str:
    return raw if isinstance(raw, str) else raw.decode("utf-8", errors="backslashreplace")


def _holder(raw: bytes | str) -> str | None:
    found = TOKEN.match(_text(raw))
    return found.group("holder") if found else None


def held(client: redis.Redis, pattern: str = "*") -> list[dict[str, Any]]:
    """Everything held now whose key matches ``pattern``, sorted by key."""
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    found: list[dict[str, Any]] = []
    for raw_key in client.scan_iter(match=pattern, count=1000):
        key = _text(raw_key)
        if key.endswith(SIBLINGS) and hash_tag(key) is not None:
            continue  # a lock's or semaphore's own bookkeeping, not a lease
        kind = _text(client.type(raw_key))
        if kind == "string":
            entry = _lock(client, raw_key, key)
        elif kind == "zset":
            entry = _semaphore(client, raw_key, key, now_ms)
        else:
            entry = None
        if entry is not None:
            found.append(entry)
    return sorted(found, key=lambda entry: str(entry["key"]))


def one(client: redis.Redis, key: str) -> dict[str, Any] | str:
    """What ``key`` holds, for ``redlock-deco release`` to show before removing it: an entry
    as :func:`held` lists them (a foreign token, such as redis-py's Lock's, shown cut short),
    or a sentence saying why there is none."""
    kind = _text(client.type(key))
    entry: dict[str, Any] | None = None
    if kind == "string":
        entry = _lock(client, key.encode(), key, foreign_tokens=True)
    elif kind == "zset":
        seconds, micros = client.time()
        entry = _semaphore(client, key.encode(), key, seconds * 1000 + micros // 1000, every=True)
    if entry is not None:
        return entry
    if kind == "none":
        return f"{key}: nothing held"
    return f"{key}: a {kind} that is no lock or semaphore (it will be refused)"


def foreign(raw: bytes | str) -> str:
    """A token that is not ours, for display: its first characters only (a token is what
    releases a lock)."""
    return f"{_text(raw)[:6]}... (not a redlock-deco token)"


def shown(raw: bytes | str) -> str:
    """Any token, for display: ``host:pid`` of ours (never the secret part), else cut short."""
    return _holder(raw) or foreign(raw)


def _lock(
    client: redis.Redis, raw_key: bytes, key: str, foreign_tokens: bool = False
) -> dict[str, Any] | None:
    value = client.get(raw_key)
    holder = _holder(value) if isinstance(value, bytes) else None
    if holder is None and foreign_tokens and value is not None:
        holder = foreign(value)
    if holder is None:
        return None
    ttl_ms = int(client.pttl(raw_key))
    return {
        "kind": "lock",
        "key": key,
        "holders": [{"holder": holder, "remaining": ttl_ms / 1000 if ttl_ms >= 0 else None}],
        "slots": 1,
        "limit": 1,
    }


def _semaphore(
    client: redis.Redis, raw_key: bytes, key: str, now_ms: int, every: bool = False
) -> dict[str, Any] | None:
    """A semaphore's live holders (``every``: ended leases too, with 0 left)."""
    members = cast(list[tuple[bytes, float]], client.zrange(raw_key, 0, -1, withscores=True))
    holders = []
    for member, ends in members:
        holder = _holder(member)
        if holder is None:
            return None  # not one of ours
        if ends > now_ms or every:
            holders.append({"holder": holder, "remaining": max(0.0, (ends - now_ms) / 1000)})
    if not holders:
        return None
    limit = client.get(sibling(key, "limit"))
    return {
        "kind": "semaphore",
        "key": key,
        "holders": holders,
        "slots": len(holders),
        "limit": int(limit) if limit is not None else None,
    }


def render_json(entries: list[dict[str, Any]]) -> str:
    return json.dumps(entries, indent=2)


def render_table(entries: list[dict[str, Any]]) -> str:
    if not entries:
        return "nothing is held"
    rows = [("KIND", "KEY", "HOLDER (host:pid)", "REMAINING", "SLOTS")]
    for entry in entries:
        limit = entry["limit"] if entry["limit"] is not None else "?"
        slots = f"{entry['slots']}/{limit}"
        for index, holder in enumerate(entry["holders"]):
            remaining = holder["remaining"]
            rows.append(
                (
                    entry["kind"] if index == 0 else "",
                    entry["key"] if index == 0 else "",
                    holder["holder"],
                    "no expiry" if remaining is None else f"{remaining:.1f}s",
                    slots if index == 0 else "",
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
