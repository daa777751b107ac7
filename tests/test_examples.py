"""Every example runs as a user would run it: as a script, with no setup (a throwaway
redis-server when REDIS_URL is unset)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from redlock_deco.testing import RedisServer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py"))


def run_example(name: str, redis_url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    if redis_url:
        env["REDIS_URL"] = redis_url
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_every_promised_example_exists() -> None:
    assert set(SCRIPTS) >= {
        "quickstart.py", "methods_and_classmethods.py", "async_service.py",
        "cron_run_once.py", "semaphore_pool.py", "quorum.py",
    }  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_example_runs_with_no_setup(name: str) -> None:
    done = run_example(name)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_quickstart_uses_redis_url_when_set(server: RedisServer) -> None:
    done = run_example("quickstart.py", server.url)
    assert done.returncode == 0, done.stderr
    assert "lost updates = 0" in done.stdout
