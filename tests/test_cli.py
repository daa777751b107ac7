"""The command line: demo and inspect, run as real subprocesses, plus --help."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from redlock_deco import Lock, Semaphore
from redlock_deco.testing import RedisServer, find_redis_server, free_port


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
    for command in ("demo", "inspect"):
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
