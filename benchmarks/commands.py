"""Load per uncontended cycle: round trips (counted client-side) and commands the server ran
(INFO commandstats, script-internal calls included)."""

from __future__ import annotations

import redis

from .candidates import LOCKS, Runner, count_round_trips, redlock_deco_limited

CYCLES = 500


def per_cycle(url: str) -> dict[str, tuple[float, float]]:
    """library -> (round trips, server commands) per acquire+release cycle."""
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
        stats = client.info("commandstats")
        executed = sum(
            v["calls"] for k, v in stats.items()
            if not k.startswith(("cmdstat_config", "cmdstat_info"))
        )  # fmt: skip
        found[library] = (sent / CYCLES, executed / CYCLES)
    return found
