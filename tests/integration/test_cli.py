"""The command line: demo, inspect (and --watch) and release, run as real subprocesses, plus
--help; every failure one line on stderr, broken pipes quiet."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from support.queues import enqueue

from redlock_deco import Lock, LockError, LockNotOwned, Semaphore, register_provider
from redlock_deco._waiting import channel
from redlock_deco.testing import LocalCluster, RedisServer, find_redis_server, free_port

ME = f"{socket.gethostname()}:{os.getpid()}"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return subprocess.run(
        [sys.executable, "-m", "redlock_deco", *args],
        env={**base, **(env or {})}, capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip


def as_the_binary_says(binary: str) -> str:
    """The product and version `--version` prints ("Valkey server v=9.1.2 sha=..." gives
    "Valkey 9.1.2"): what the demo and inspect must call the server, whatever its INFO
    reports for compatibility."""
    said = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=10, check=True
    ).stdout
    found = re.match(r"(\w+) server v=(\S+)", said)
    assert found, said
    return f"{found[1]} {found[2]}"


@pytest.mark.slow
def test_demo_proves_the_invariants_without_flooding_a_log(
    server: RedisServer, r: redis.Redis
) -> None:
    done = cli("demo", "--url", server.url, "--workers", "3", "--seconds", "1.5")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert out.splitlines()[0].endswith(f" ({as_the_binary_says(server.binary)})")
    assert "lost updates" in out and "(counter" in out and "all invariants held" in out
    assert "of limit 3" in out and "hand-off p50 / p99" in out
    progress = [line for line in out.splitlines() if "@locked calls " in line and "s  " in line]
    assert len(progress) <= 4  # about one line a second when stdout is not a terminal
    assert r.dbsize() == 0  # the demo cleans up after itself


@pytest.mark.slow
def test_demo_starts_its_own_server_when_given_no_url() -> None:
    done = cli("demo", "--workers", "2", "--seconds", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    binary = find_redis_server()
    first = done.stdout.splitlines()[0]
    assert first.endswith(f" ({as_the_binary_says(binary)}, a throwaway {Path(binary).name})")


def test_inspect_table_and_json(server: RedisServer) -> None:
    lock = Lock("order:7", ttl=30)
    sem = Semaphore("export:acme", limit=3, ttl=20)
    lock.acquire()
    sem.acquire()
    sem.acquire()
    try:
        table = cli("inspect", "--url", server.url)
        assert table.returncode == 0, table.stderr
        header, *rows = table.stdout.splitlines()
        assert header == f"{as_the_binary_says(server.binary)} at {server.url}"
        assert rows[0].split()[:2] == ["KIND", "KEY"]
        assert any("lock:order:7" in row and "1/1" in row for row in rows)
        assert any("sem:export:acme" in row and "2/3" in row for row in rows)
        token = server.client().get("lock:order:7").decode()
        assert token.rsplit(":", 1)[1] not in table.stdout  # never the secret part
        assert token.rsplit(":", 2)[0] in table.stdout  # host:pid (before process id and secret)
        data = json.loads(cli("inspect", "--url", server.url, "sem:*", "--json").stdout)
        assert [(e["kind"], e["key"], e["slots"], e["limit"]) for e in data] == [
            ("semaphore", "sem:export:acme", 2, 3)
        ]
        assert all(0 < h["remaining"] <= 20 for h in data[0]["holders"])
    finally:
        lock.release()
        sem.release()
        sem.release()
    assert cli("inspect", "--url", server.url).stdout.splitlines()[1:] == ["nothing is held"]


def test_inspect_needs_a_url_and_never_prints_passwords() -> None:
    missing = cli("inspect")
    assert missing.returncode == 2 and "--url" in missing.stderr
    dead = f"redis://user:hunter2@127.0.0.1:{free_port()}/0?socket_connect_timeout=1"
    done = cli("inspect", "--url", dead)
    assert done.returncode == 2
    assert "hunter2" not in done.stderr + done.stdout and "***" in done.stderr


def test_help_explains_each_command_with_an_example() -> None:
    top = cli("--help")
    assert top.returncode == 0 and "redlock-deco demo" in top.stdout
    for command in ("demo", "inspect", "release"):
        page = cli(command, "--help")
        assert page.returncode == 0 and "example" in page.stdout
        assert f"redlock-deco {command}" in page.stdout


def test_console_script_is_the_same_command() -> None:
    script = Path(sys.executable).parent / "redlock-deco"
    assert script.exists(), "pip install -e . installs the redlock-deco console script"
    done = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and "inspect" in done.stdout


def one_line(stderr: str) -> str:
    """A failure's report: exactly one line, no traceback."""
    lines = stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def until(condition: Callable[[], object], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition never met"
        time.sleep(0.005)


def test_release_refuses_without_a_terminal_and_releases_with_yes(
    server: RedisServer, r: redis.Redis
) -> None:
    lock = Lock("order:7", ttl=30)
    sem = Semaphore("export", limit=2, ttl=30)
    assert lock.acquire() and sem.acquire()
    asked = cli("release", "lock:order:7", "sem:export", "lock:free", "--url", server.url)
    assert asked.returncode == 2
    assert "--yes" in one_line(asked.stderr) and "nothing was released" in asked.stderr
    assert "lock:order:7" in asked.stdout and ME in asked.stdout  # what it would remove
    assert "lock:free: nothing held" in asked.stdout
    assert r.exists("lock:order:7", "sem:export") == 2  # untouched
    done = cli("release", "lock:order:7", "sem:export", "--url", server.url, "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"lock:order:7: removed lock held by {ME} ({done.stdout.split('(')[1].split(')')[0]})",
        f"sem:export: removed semaphore held by {ME} ({done.stdout.split('(')[2].split(')')[0]})",
    ]
    assert r.dbsize() == 0
    with pytest.raises(LockNotOwned):
        lock.release()
    with pytest.raises(LockNotOwned):
        sem.release()


def test_release_asks_on_a_terminal(server: RedisServer, r: redis.Redis) -> None:
    lock = Lock("asked", ttl=30)
    assert lock.acquire()
    for answer, status, left in (("n", 1, 1), ("y", 0, 0)):
        primary, secondary = pty.openpty()  # stdin a terminal, where an operator answers
        try:
            done = subprocess.Popen(
                [sys.executable, "-m", "redlock_deco", "release", "lock:asked",
                 "--url", server.url],
                stdin=secondary, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            os.write(primary, f"{answer}\n".encode())
            out, err = done.communicate(timeout=60)
        finally:
            os.close(primary)
            os.close(secondary)
        assert done.returncode == status, err
        assert "release 1 key(s)? [y/N]" in out and r.exists("lock:asked") == left
        if answer == "y":
            assert f"lock:asked: removed lock held by {ME}" in out
        else:
            assert out.rstrip().endswith("nothing released")
    with pytest.raises(LockNotOwned):
        lock.release()


def prompted(process: subprocess.Popen[bytes]) -> bytes:
    """What ``process`` printed up to its confirmation prompt (input() flushes it)."""
    assert process.stdout is not None
    seen = b""
    while b"[y/N] " not in seen:
        chunk = os.read(process.stdout.fileno(), 4096)
        assert chunk, seen
        seen += chunk
    return seen


def test_release_removes_only_what_it_showed(server: RedisServer, r: redis.Redis) -> None:
    first = Lock("swap", ttl=30)
    assert first.acquire()
    primary, secondary = pty.openpty()
    try:
        asking = subprocess.Popen(
            [sys.executable, "-m", "redlock_deco", "release", "lock:swap", "lock:later",
             "--url", server.url],
            stdin=secondary, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        shown = prompted(asking).decode()
        assert "lock:later: nothing held" in shown and ME in shown
        # While the operator reads: the holder shown releases, another takes it, and the key
        # that showed nothing held is taken too.
        first.release()
        second, later = Lock("swap", ttl=30), Lock("later", ttl=30)
        assert second.acquire() and later.acquire()
        taken = r.mget("lock:swap", "lock:later")
        os.write(primary, b"y\n")
        out, err = asking.communicate(timeout=60)
    finally:
        os.close(primary)
        os.close(secondary)
    assert asking.returncode == 1, err
    assert one_line(err.decode()) == (
        f"redlock-deco release: lock:swap changed since it was shown (now held by {ME}); "
        "nothing removed; run the command again"
    )
    assert b"removed" not in out
    assert r.mget("lock:swap", "lock:later") == taken  # neither new holder lost its lease
    assert second.owned() and later.owned()
    second.release()
    later.release()


def test_release_refuses_values_and_bookkeeping_unless_forced(
    server: RedisServer, r: redis.Redis
) -> None:
    r.set("session:abc", '{"user": 7}')  # an application's value, no expiry
    with Lock("f", ttl=30, fencing=True):
        for key, message, force in (
            ("session:abc", "'session:abc' holds a string that is no lock token", ()),
            ("{lock:f}:fence", "'{lock:f}:fence' is the fencing counter of 'lock:f'", ("--force",)),
        ):
            refused = cli("release", key, "--yes", *force, "--url", server.url)
            assert refused.returncode == 1 and refused.stdout == ""
            assert message in one_line(refused.stderr)
        assert r.get("session:abc") == b'{"user": 7}' and r.exists("lock:f", "{lock:f}:fence") == 2
    asked = cli("release", "session:abc", "--force", "--url", server.url)  # shown, then refused
    assert asked.returncode == 2 and "value" in asked.stdout and "session:abc" in asked.stdout
    forced = cli("release", "session:abc", "--yes", "--force", "--url", server.url)
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.startswith("session:abc: removed a string that is not a recognised lock")
    assert not r.exists("session:abc")


def test_release_refuses_a_key_that_is_no_lock(server: RedisServer, r: redis.Redis) -> None:
    r.hset("lock:h", "field", 1)
    done = cli("release", "lock:h", "--url", server.url, "--yes")
    assert done.returncode == 1
    assert "holds neither a lock nor a semaphore" in one_line(done.stderr)
    assert r.hget("lock:h", "field") == b"1"


# A name built from user data (``"ticket:{title}"``): a newline that would forge a table row,
# and escape sequences that would clear a line and turn the terminal red (b06).
HOSTILE = "x\nlock  lock:payroll:all  admin:1  99.9s  1/1\x1b[2K\x1b[31m"
SHOWN = "x\\nlock  lock:payroll:all  admin:1  99.9s  1/1\\x1b[2K\\x1b[31m"


def test_control_characters_in_key_names_are_escaped(server: RedisServer, r: redis.Redis) -> None:
    hostile, free = Lock("ticket:" + HOSTILE, ttl=30), "lock:free\r\x1b[31m"
    assert hostile.acquire()
    table = cli("inspect", "--url", server.url)
    _header, _columns, row = table.stdout.splitlines()  # one row: none forged
    assert "\x1b" not in table.stdout and row.startswith(f"lock  lock:ticket:{SHOWN}  {ME}")
    as_json = json.loads(cli("inspect", "--url", server.url, "--json").stdout)
    assert [entry["key"] for entry in as_json] == [f"lock:ticket:{HOSTILE}"]  # exact, as data
    asked = cli("release", f"lock:ticket:{HOSTILE}", free, "--url", server.url)
    assert "\x1b" not in asked.stdout + asked.stderr and asked.returncode == 2
    assert f"lock:ticket:{SHOWN}" in asked.stdout
    assert "lock:free\\r\\x1b[31m: nothing held" in asked.stdout
    assert len(asked.stdout.splitlines()) == 4  # the note, "would release", columns, one row
    watching = subprocess.Popen(
        [sys.executable, "-m", "redlock_deco", "inspect", "--url", server.url, "--watch", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watching.stdout is not None
    watched = [watching.stdout.readline() for _ in range(4)]  # stamp, columns, row, blank
    watching.send_signal(signal.SIGINT)
    watching.communicate(timeout=30)
    assert "\x1b" not in "".join(watched) and f"lock:ticket:{SHOWN}" in watched[2]
    done = cli("release", f"lock:ticket:{HOSTILE}", "--url", server.url, "--yes")
    assert done.returncode == 0 and "\x1b" not in done.stdout
    with pytest.raises(LockError):  # removed by the operator: its holder hears it is gone
        hostile.release()
    assert done.stdout.startswith(f"lock:ticket:{SHOWN}: removed lock held by {ME}")
    assert r.dbsize() == 0


def test_inspect_watch_refreshes_until_ctrl_c(server: RedisServer) -> None:
    lock = Lock("watched", ttl=30)
    lock.acquire()
    watching = subprocess.Popen(
        [sys.executable, "-m", "redlock_deco", "inspect", "--url", server.url, "--watch", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watching.stdout is not None
    tables = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = watching.stdout.readline()
        if "lock:watched" in line:
            tables += 1
            if tables == 2:
                lock.release()  # a later refresh shows it gone
        if "nothing is held" in line:
            break
    watching.send_signal(signal.SIGINT)
    _out, err = watching.communicate(timeout=30)
    assert tables == 2 and watching.returncode == 0 and err == ""  # a clean exit, no traceback


def test_inspect_watch_redraws_in_place_on_a_terminal(server: RedisServer) -> None:
    primary, secondary = pty.openpty()
    watching = subprocess.Popen(
        [sys.executable, "-m", "redlock_deco", "inspect", "--url", server.url, "--watch=0.1"],
        stdout=secondary, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    os.close(secondary)
    seen = b""
    try:
        while seen.count(b"\x1b[H") < 2:
            seen += os.read(primary, 4096)
        watching.send_signal(signal.SIGINT)
        _out, err = watching.communicate(timeout=30)
    finally:
        watching.kill()
        os.close(primary)
    assert watching.returncode == 0 and err == ""
    assert seen.startswith(b"\x1b[2J")  # cleared once, then redrawn from the top
    assert b"nothing is held\x1b[K" in seen


def test_failures_are_one_line_without_a_traceback(server: RedisServer) -> None:
    no_scheme = cli("inspect", "--url", "localhost:6379")
    assert no_scheme.returncode == 2
    assert "write it as redis://HOST:PORT/DB" in one_line(no_scheme.stderr)
    assert "e.g. redis://localhost:6379/0" in no_scheme.stderr
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    for command in ("inspect", "demo", "release"):
        started = time.monotonic()
        args = ("lock:x",) if command == "release" else ()
        done = cli(command, *args, "--url", nowhere)
        assert done.returncode == 2 and time.monotonic() - started < 10
        assert f"cannot reach {nowhere}" in one_line(done.stderr)
    debug = cli("inspect", "--url", nowhere, "--debug")
    assert debug.returncode != 0 and "Traceback" in debug.stderr  # asked for it
    top = cli("--debug", "inspect", "--url", nowhere)
    assert "Traceback" in top.stderr


def test_rediss_to_a_plain_server_fails_fast_with_a_hint(server: RedisServer) -> None:
    started = time.monotonic()
    done = cli("inspect", "--url", server.url.replace("redis://", "rediss://"))
    took = time.monotonic() - started  # the interpreter's start included
    line = one_line(done.stderr)
    assert done.returncode == 2 and took < 5, (took, line)
    assert "answers without TLS: use redis:// instead of rediss://" in line


def test_a_reader_that_goes_away_is_no_error(server: RedisServer, r: redis.Redis) -> None:
    # More than a pipe buffer of table, so writing it meets the closed pipe.
    with r.pipeline(transaction=False) as pipe:
        for i in range(3000):
            pipe.set(f"lock:many:{i}", f"host:1:{i:08x}:{'0' * 32}", px=60_000)
        pipe.execute()
    for command in (
        ("inspect", "--url", server.url),
        ("demo", "--url", server.url, "--seconds", "1.5", "--workers", "1"),
    ):
        with subprocess.Popen(
            [sys.executable, "-m", "redlock_deco", *command],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ) as reading:  # fmt: skip
            assert reading.stdout is not None and reading.stderr is not None
            assert reading.stdout.readline()  # `| head -1`
            reading.stdout.close()
            status = reading.wait(60)
            assert reading.stderr.read() == "", command  # quiet: no BrokenPipeError, traceback
        assert status == (1 if command[0] == "inspect" else 0)  # the demo still proves its case
    assert not any(r.scan_iter(match="redlock-deco-demo:*"))  # and cleans up after itself


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3) as local:
        yield local


@pytest.mark.slow  # a local cluster, like the other cluster tests
def test_release_on_a_cluster_node_serves_the_oldest_waiter(cluster: LocalCluster) -> None:
    """PUBLISH on a cluster node counts that node's subscribers only: the head waiter, heard
    on another node, must not be judged gone and skipped for the next one."""
    client = cluster.client()
    client.flushall(target_nodes=client.PRIMARIES)
    register_provider("cluster", client)
    # This process hears its grants on the node serving its channel's slot: take a key that
    # another node serves, where PUBLISH answers 0 for this process's waiter.
    ours = client.get_node_from_key(channel()).port
    key = next(
        k for i in range(100) if client.get_node_from_key(k := f"lock:fair:{i}").port != ours
    )
    node = client.get_node_from_key(key).port
    other = next(server.port for server in cluster.servers if server.port != node)
    holder = Lock(key.removeprefix("lock:"), provider="cluster", ttl=30)
    assert holder.acquire()
    got, done = threading.Event(), threading.Event()

    def first() -> None:
        with Lock(key.removeprefix("lock:"), provider="cluster", wait=10):
            got.set()
            done.wait(10)

    waiter = threading.Thread(target=first)
    waiter.start()
    listener = redis.Redis(port=node).pubsub()  # a later waiter, heard on the key's own node
    try:
        until(lambda: client.zcard(f"{{{key}}}:queue") == 1)
        listener.subscribe("redlock-deco:elsewhere:1:0badc0de")
        assert listener.get_message(timeout=5)  # subscribed: PUBLISH there counts 1
        enqueue(client, f"{{{key}}}:queue", f"elsewhere:1:0badc0de:{'0' * 32}")
        moved = cli("release", key, "--yes", "--url", f"redis://127.0.0.1:{other}/0")
        assert moved.returncode == 1 and moved.stdout == ""
        assert f"'{key}' is served by another node of this cluster, 127.0.0.1:{node} (slot " in (
            one_line(moved.stderr)
        )
        assert "point --url at that node; nothing was removed" in moved.stderr
        released = cli("release", key, "--yes", "--url", f"redis://127.0.0.1:{node}/0")
        assert released.returncode == 0, released.stderr
        assert released.stdout.rstrip().endswith(f"; handed to waiting {ME}")  # not elsewhere:1
        assert got.wait(5)
        with pytest.raises(LockNotOwned):
            holder.release()
    finally:
        done.set()
        waiter.join(10)
        listener.close()
        client.flushall(target_nodes=client.PRIMARIES)
        client.close()
