"""The least-privilege Redis ACL the library needs, defined once.

GUARANTEES.md shows the output of :func:`acl_setuser`, and
``tests/integration/test_acl.py`` applies the same rules to a real server and runs every key
layout through them, so the documented ACL cannot drift from the keys and commands the code
uses (it did once: names with a stray ``}`` got waiter keys no documented pattern covered, and
every call on them failed with NOPERM).

Keys. Every key the library writes for a lease key ``K = prefix + name`` is one of
:func:`redlock_deco._protocol.sibling`'s three shapes, so three patterns per prefix cover them
all -- the lease key, its fencing counter, semaphore limit, readers sorted set and waiter
queue:

- ``K`` itself, and ``K:suffix`` when ``K`` has a hash tag of its own: ``prefix*``;
- ``{K}:suffix``, the whole key as hash tag: ``{prefix*``;
- ``{sN}:K:suffix`` when ``K`` contains a ``}`` that would end that tag early (``N`` is a
  number chosen so the key shares ``K``'s cluster slot): ``{s[0-9]*}:prefix*``.

Commands. The library sends EVALSHA (EVAL after NOSCRIPT), SUBSCRIBE while waiting (one
subscriber per process and server hears hand-offs on ``redlock-deco:host:pid:id``) and WAIT
for ``replicas=N``; its Lua scripts run the data commands in :data:`SCRIPT_COMMANDS` as the
calling user, so each of them needs a grant of its own, and PUBLISH a hand-off on the
waiter's channel (:data:`CHANNELS`).
"""

from __future__ import annotations

from collections.abc import Iterable

from ._options import THROTTLE_PREFIX
from ._protocol import KINDS

#: Commands the library sends itself.
CLIENT_COMMANDS = ("evalsha", "eval", "subscribe", "unsubscribe")
#: Only with ``replicas=N``: wait for replica acknowledgements after acquiring.
REPLICA_COMMANDS = ("wait",)
#: Commands the Lua scripts run (``tests/test_acl.py`` checks this against every script).
SCRIPT_COMMANDS = (
    "get", "set", "del", "exists", "pttl", "pexpire", "time",
    "zadd", "zrem", "zcard", "zcount", "zrange", "zscore", "zremrangebyscore", "zpopmin",
    "publish", "pubsub|numsub",
)  # fmt: skip
#: The hand-off channels (one per waiting process).
CHANNELS = ("redlock-deco:*",)
#: What redis-py's cluster client needs to learn the slot map and the commands' key positions
#: (and, on redis-py 5.0, INFO: its sync client checks each startup node's cluster_enabled).
CLUSTER_COMMANDS = ("cluster|slots", "command", "info")

#: The default prefixes of every primitive kind (``_protocol.KINDS``), and the throttle's.
DEFAULT_PREFIXES = (*dict.fromkeys(kind.prefix for kind in KINDS), THROTTLE_PREFIX)
_GLOB_SPECIALS = "\\*?[]"


def glob_escape(text: str) -> str:
    """``text`` as a literal inside a Redis glob pattern (ACL key patterns are globs)."""
    return "".join("\\" + c if c in _GLOB_SPECIALS else c for c in text)


def key_patterns(prefix: str) -> list[str]:
    """The ACL key patterns (``~...``) covering every key written under ``prefix``."""
    literal = glob_escape(prefix)
    return [f"~{literal}*", f"~{{{literal}*", f"~{{s[0-9]*}}:{literal}*"]


def acl_rules(
    prefixes: Iterable[str] = DEFAULT_PREFIXES, *, replicas: bool = True, cluster: bool = False
) -> list[str]:
    """ACL SETUSER rules granting what the library needs under ``prefixes``, and nothing else.

    ``prefixes`` are the ``prefix=`` values in use (``"lock:"`` for locks, ``"sem:"`` for
    semaphores by default). ``replicas=False`` leaves out WAIT (only ``replicas=N`` sends
    it); ``cluster=True`` adds what redis-py's ``RedisCluster`` asks every node at start.
    Passwords and ``on`` are the caller's to add. The CLI's ``inspect`` scans the keyspace
    and is meant for an operator's own user, not this one.
    """
    keys = [pattern for prefix in prefixes for pattern in key_patterns(prefix)]
    commands = [
        *CLIENT_COMMANDS,
        *(REPLICA_COMMANDS if replicas else ()),
        *SCRIPT_COMMANDS,
        *(CLUSTER_COMMANDS if cluster else ()),
    ]
    # resetkeys/resetchannels/-@all first: rules add up, so a user that existed before keeps
    # none of its earlier grants.
    channels = [f"&{glob_escape(c[:-1])}*" for c in CHANNELS]
    return ["resetkeys", *keys, "resetchannels", *channels, "-@all", *(f"+{c}" for c in commands)]


def acl_setuser(user: str = "locker", prefixes: Iterable[str] = DEFAULT_PREFIXES) -> str:
    """The ``ACL SETUSER`` line for ``user`` (password placeholder ``>secret``), as documented."""
    return " ".join(["ACL SETUSER", user, "on", ">secret", *acl_rules(prefixes)])
