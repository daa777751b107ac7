"""Load per uncontended cycle: round trips (counted client-side), and the commands the server
ran and the time it spent in them (INFO commandstats, script-internal calls included)."""

from __future__ import annotations

from typing import Any

import redis

from .candidates import LOCKS, Runner, count_round_trips, redlock_deco_limited

CYCLES = 500

# The benchmark's own CONFIG RESETSTAT and INFO, not the library's load.
_OURS = ("cmdstat_config", "cmdstat_info")


def server_load(client: Any) -> tuple[int, int]:
    """(commands, microseconds) the server spent since the last CONFIG RESETSTAT.

    Both are summed over ``INFO commandstats``, which lists a command called from a Lua
    script under its own name as well: the script's ``usec`` already contains its inner
    calls' time, so a script's inner commands are charged twice (an over-estimate for
    script-based libraries, of a fraction of a microsecond per inner call).
    """
    stats = client.info("commandstats")
    mine = [v for k, v in stats.items() if not k.startswith(_OURS)]
    return sum(v["calls"] for v in mine), sum(v["usec"] for v in mine)


def per_cycle(url: str) -> dict[str, tuple[float, float, float]]:
    """library -> (round trips, server commands, server us) per acquire+release cycle."""
    counter = count_round_trips()
    client = redis.Redis.from_url(url)
    runners: dict[str, Runner] = {
        library: factory(url, f"bench:cmd:{library}", 10.0)
        for library, (factory, _) in LOCKS.items()
    }
    runners["redlock-deco @limited(limit=3)"] = redlock_deco_limited(3)(url, "bench:cmd:sem", 10.0)
    found = {}
    for library, run in runners.items():
        run(lambda: None)  # connect and load scripts outside the count
        client.config_resetstat()
        before = counter()
        for _ in range(CYCLES):
            run(lambda: None)
        sent = counter() - before
        executed, usec = server_load(client)
        found[library] = (sent / CYCLES, executed / CYCLES, usec / CYCLES)
    return found
