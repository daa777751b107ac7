"""The README's two set-up commands, verbatim, in a fresh clone with a fresh virtual
environment: the demo must prove its invariants and the test command must pass.

The nested test run is limited to the pure core and the examples (``tests/core`` and
``tests/integration/test_examples.py``, via PYTEST_ADDOPTS, so the command line stays
verbatim) and never runs this test again: what it proves is that the two commands work from
a fresh clone's own files (the venv, the extras, the server binary, the demo); CI's first leg
already runs the whole suite from a clean clone, and running it a second time here cost
CI ten minutes.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NESTED = "REDLOCK_DECO_FRESH_CLONE"


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set up a fresh clone: two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_readme_has_exactly_two_set_up_commands() -> None:
    demo, tests = readme_commands()
    assert "redlock_deco demo" in demo and "pytest" in tests


@pytest.mark.nested  # a CI leg of its own: it runs the whole README command again
@pytest.mark.timeout(900)
@pytest.mark.skipif(bool(os.environ.get(NESTED)), reason="already inside a fresh-clone run")
def test_readme_commands_work_in_a_fresh_clone(tmp_path: Path) -> None:
    if subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True
    ).returncode:
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "VIRTUAL_ENV")}
    env[NESTED] = "1"
    env["PYTEST_ADDOPTS"] = (
        "-m 'not slow' -p no:cacheprovider tests/core tests/integration/test_examples.py"
    )
    demo, tests = readme_commands()
    outputs = []
    for command in (demo, tests):
        done = subprocess.run(
            ["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True,
            timeout=600, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        outputs.append(done.stdout)
    assert "all invariants held" in outputs[0] and "lost updates" in outputs[0]
    assert re.search(r"\d+ passed", outputs[1])
