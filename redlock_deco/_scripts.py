"""The Lua scripts, loaded from package files, and the one table of their reply codes.

Each ``lua/*.lua`` file starts with its contract (KEYS, ARGV, returns). A header line
``-- include: waiters`` prepends ``lua/waiters.lua``, so the queue and hand-off logic exists
once in Lua although every lock and semaphore script uses it; such a script has a twin for a
Redis Cluster (``Script.on_cluster``), ``lua/moving.lua`` first. Scripts are run with EVALSHA
and fall back to EVAL on NOSCRIPT (a restarted or flushed server), see
:mod:`redlock_deco._drivers`.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from importlib import resources

from ._errors import RedlockDecoError


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str
    waiting: bool = False  # run by acquirers (and waiters), not by holders: see drivers.Lanes
    # The same script for a Redis Cluster, whose slots can be moved: lua/moving.lua first
    # (a script that empties a key of a slot being moved must not stop half-way); None: this
    # one runs there as it is (it never touches a key after deleting it).
    on_cluster: Script | None = None

    def on(self, cluster: bool) -> Script:
        """The text to run on a cluster (``cluster``) or on one server."""
        return self.on_cluster if cluster and self.on_cluster is not None else self


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("lua").joinpath(f"{name}.lua").read_text("utf-8")


def load(name: str, *, waiting: bool = False) -> Script:
    body = _read(name)
    includes: list[str] = []
    for line in body.splitlines():
        if line.startswith("-- include: "):
            includes.extend(include.strip() for include in line[12:].split(","))
    source = "\n".join([*map(_read, includes), body])
    on_cluster = None
    if "waiters" in includes:  # the scripts that empty keys and touch them again
        moving = "\n".join([_read("moving"), source])
        on_cluster = Script(name, moving, _sha(moving), waiting)
    return Script(name, source, _sha(source), waiting, on_cluster)


def _sha(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()


LOCK_ACQUIRE = load("lock_acquire", waiting=True)
LOCK_RELEASE = load("lock_release")
LOCK_EXTEND = load("lock_extend")
LOCK_OWNED = load("lock_owned")
LOCK_ADOPT = load("lock_adopt")
LOCK_COUNT = load("lock_count")
SHARED_ACQUIRE = load("shared_acquire", waiting=True)
SHARED_RELEASE = load("shared_release")
SHARED_EXTEND = load("shared_extend")
SHARED_OWNED = load("shared_owned")
SHARED_ADOPT = load("shared_adopt")
SEM_ACQUIRE = load("sem_acquire", waiting=True)
SEM_RELEASE = load("sem_release")
SEM_EXTEND = load("sem_extend")
SEM_OWNED = load("sem_owned")
SEM_ADOPT = load("sem_adopt")
SEM_COUNT = load("sem_count")
FORCE_RELEASE = load("force_release")  # an operator's: see _admin.py
THROTTLE_ADMIT = load("throttle_admit")
THROTTLE_RETURN = load("throttle_return")


class Outcome(enum.Enum):
    ACQUIRED = "acquired"
    BUSY = "busy"
    RELEASED = "released"
    EXTENDED = "extended"
    ADOPTED = "adopted"
    OWNER = "owner"
    NOT_OWNER = "not owner"
    GONE = "gone"  # released: the lease was not there any more (ended, or released already)
    WRONG_TYPE = "wrong type"  # force release: the key is no lock or semaphore of that kind
    CHANGED = "changed"  # force release: held by someone the caller did not expect
    NOT_A_LOCK = "not a lock"  # force release: a string that holds no lock token
    ADMITTED = "admitted"  # a throttle let the call in, now or at its reserved slot
    RETURNED = "returned"  # a throttle took back a reservation nobody will use
    KEPT = "kept"  # ... or could not: a later call reserved after it


class ScriptReplyError(RedlockDecoError):
    """A script answered with a code this version does not know (mixed versions?)."""


#: The one table from (operation, status code) to outcome; anything else is an error,
#: never a silent False.
REPLIES: dict[tuple[str, int], Outcome] = {
    ("acquire", 1): Outcome.ACQUIRED,
    ("acquire", 0): Outcome.BUSY,
    ("release", 1): Outcome.RELEASED,
    ("release", 0): Outcome.NOT_OWNER,
    ("release", 2): Outcome.GONE,
    ("extend", 1): Outcome.EXTENDED,
    ("extend", 0): Outcome.NOT_OWNER,
    ("adopt", 1): Outcome.ADOPTED,
    ("adopt", 0): Outcome.NOT_OWNER,
    ("owned", 1): Outcome.OWNER,
    ("owned", 0): Outcome.NOT_OWNER,
    ("force_release", 1): Outcome.RELEASED,
    ("force_release", 0): Outcome.GONE,
    ("force_release", 3): Outcome.WRONG_TYPE,
    ("force_release", 4): Outcome.CHANGED,
    ("force_release", 5): Outcome.NOT_A_LOCK,
    ("admit", 1): Outcome.ADMITTED,
    ("admit", 0): Outcome.BUSY,
    ("admit", 2): Outcome.WRONG_TYPE,
    ("return", 1): Outcome.RETURNED,
    ("return", 0): Outcome.KEPT,
}


def outcome(operation: str, code: object) -> Outcome:
    found = REPLIES.get((operation, code)) if isinstance(code, int) else None
    if found is None:
        raise ScriptReplyError(
            f"unexpected reply {code!r} to {operation}: the Redis scripts and this "
            "redlock-deco version disagree"
        )
    return found
