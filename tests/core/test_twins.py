"""Every sync/async pair differs only where ``twins.txt`` says, and says why (see twins.py).

No server: the package's source is read, not run.
"""

from __future__ import annotations

import ast

from support import twins


def test_every_twin_differs_only_as_recorded() -> None:
    table = twins.read_table()
    found = {pair.title: pair for pair in twins.pairs()}
    assert len([p for p in found.values() if p.sync_name]) > 40  # it reads the package
    problems = []
    for title, pair in found.items():
        if pair.sync_name is not None and not pair.difference:
            if title in table:
                problems.append(f"[{title}] is recorded but the twins are now the same: drop it")
            continue
        if title not in table:
            problems.append(f"[{title}] differs and is not in twins.txt")
        elif table[title][1] != pair.difference:
            problems.append(f"[{title}] differs otherwise than twins.txt records")
        elif table[title][0] in ("", twins.UNEXPLAINED):
            problems.append(f"[{title}] has no why: line")
        else:
            continue
        problems.extend("    " + line for line in pair.difference)
    problems.extend(f"[{title}] is in twins.txt but no such pair exists" for title in table
                    if title not in found)  # fmt: skip
    assert not problems, (
        "sync/async twins drifted (fix the twin that is wrong, or record the difference with "
        "`python -m tests.support.twins --update` and say why in tests/support/twins.txt):\n"
        + "\n".join(problems)
    )


def test_the_normalisation_sees_a_one_sided_change() -> None:
    """The check is not blind: a condition changed in one twin shows as a difference."""
    sync = "def take(x):\n    if x > 1:\n        run(x)\n"
    drifted = "async def take_async(x):\n    if x >= 1:\n        await run_async(x)\n"
    same = "async def take_async(x):\n    if x > 1:\n        await run_async(x)\n"

    def lines(source: str) -> list[str]:
        node = ast.parse(source).body[0]
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        return twins.normalised(node)

    assert lines(same) == lines(sync)
    assert lines(drifted) != lines(sync)
