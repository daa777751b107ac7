"""Every example runs as a user would run it: as a script, with no setup (a throwaway
redis-server when REDIS_URL is unset)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from redlock_deco.testing import RedisServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
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
        "cron_run_once.py", "semaphore_pool.py", "quorum.py", "prometheus_metrics.py",
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


def test_prometheus_recipe_counts_contended_calls(server: RedisServer) -> None:
    """The recipe's listener, imported as an application would, after contended calls on
    the test server: one wait and one hold per call, the skipped refresh counted busy, all
    under the template and function labels (no per-call name in any label)."""
    import importlib.util

    from prometheus_client import CollectorRegistry

    from redlock_deco import add_listener, remove_listener

    spec = importlib.util.spec_from_file_location(
        "prometheus_metrics", EXAMPLES / "prometheus_metrics.py"
    )
    assert spec is not None and spec.loader is not None
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    registry = CollectorRegistry()
    listener = recipe.PrometheusListener(registry)
    add_listener(listener)
    try:
        assert recipe.contend(4, day="d1") is None  # skipped: the lock was held
        assert recipe.contend(3, day="d2") is None
    finally:
        remove_listener(listener)
    labels = {"template": "report:{day}", "provider": "default"}
    build = {**labels, "function": "prometheus_metrics.build_report"}
    refresh = {**labels, "function": "prometheus_metrics.refresh_report"}
    sample = registry.get_sample_value
    assert sample("redlock_deco_wait_seconds_count", {**build, "outcome": "acquired"}) == 7
    assert sample("redlock_deco_hold_seconds_count", build) == 7
    held = sample("redlock_deco_hold_seconds_sum", build)
    assert held is not None and 7 * 0.02 <= held < 5  # each build sleeps 20 ms
    waited = sample("redlock_deco_wait_seconds_sum", {**build, "outcome": "acquired"})
    assert waited is not None and waited >= 0.02 * (1 + 2 + 3)  # d1's queue: 20 + 40 + 60 ms
    assert sample("redlock_deco_busy_total", refresh) == 2
    assert sample("redlock_deco_wait_seconds_count", {**refresh, "outcome": "busy"}) == 2
    assert sample("redlock_deco_lost_total", build) is None  # nothing lost: no series at all
    names = {s.labels.get("template") for m in registry.collect() for s in m.samples}
    assert names <= {"report:{day}", None}  # never "report:d1"
