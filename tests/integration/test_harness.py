"""The test suite's own harness holds under load (see tests/support/harness.py)."""

from __future__ import annotations

import ast
import difflib
import gc
import random
import threading
from pathlib import Path

import pytest
from support.harness import AST_RACE


@pytest.mark.skipif(not AST_RACE, reason="this Python builds ASTs safely across threads")
def test_threads_parsing_while_collections_switch_threads_all_get_their_ast() -> None:
    """gh-106905's reproduction, scaled down: without conftest's guard, 3.11.7 raised
    "AST constructor recursion depth mismatch" in about one thread in three, and in pytest's
    own failure formatting that was an INTERNALERROR ending the whole run."""

    def busy_collection(phase: str, info: dict[str, int]) -> None:  # runs Python: may switch
        lines = [f"{random.randint(0, 10)}\n" for _ in range(200)]
        list(difflib.unified_diff(lines, sorted(lines)))

    source = (Path(__file__).parent / "test_stateful.py").read_text()
    errors: list[BaseException] = []

    def parse() -> None:
        try:
            for _ in range(5):
                ast.parse(source)
        except SystemError as exc:
            errors.append(exc)

    gc.callbacks.append(busy_collection)
    try:
        threads = [threading.Thread(target=parse) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.callbacks.remove(busy_collection)
    assert errors == []
