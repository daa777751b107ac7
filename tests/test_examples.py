"""The runnable examples run as a user would run them: as scripts, with no setup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from redlock_deco.testing import RedisServer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.slow
@pytest.mark.parametrize("own_server", [True, False], ids=["throwaway", "REDIS_URL"])
def test_quickstart(own_server: bool, server: RedisServer) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    if not own_server:
        env["REDIS_URL"] = server.url
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "lost updates = 0" in done.stdout
