"""The suite's own harness: a guard for a CPython race that ended whole runs (installed by
tests/conftest.py, checked by tests/integration/test_harness.py)."""

from __future__ import annotations

import ast
import gc
import os
import sys
import threading
from typing import Any

VERSION = sys.version_info[:3]
AST_RACE = (3, 11) <= VERSION < (3, 11, 8) or (3, 12) <= VERSION < (3, 12, 2)


def one_ast_parse_at_a_time() -> None:
    """CPython 3.11 before 3.11.8 and 3.12 before 3.12.2 count AST-building depth in state
    shared by all threads (gh-106905): a thread printing a traceback (3.11 parses source for
    its carets) while a garbage collection switched threads in pytest's formatting of a
    failure raised "SystemError: AST constructor recursion depth mismatch" there, an
    INTERNALERROR that ended the whole run at its first failure (seen on a busy machine).
    One parse at a time, and no collection in the middle of one."""
    lock = threading.RLock()
    parse = ast.parse

    def guarded(*args: Any, **kwargs: Any) -> Any:
        with lock:
            collecting = gc.isenabled()
            gc.disable()
            try:
                return parse(*args, **kwargs)
            finally:
                if collecting:
                    gc.enable()

    def unlock_in_child() -> None:  # a fork while another thread held it
        nonlocal lock
        lock = threading.RLock()

    os.register_at_fork(after_in_child=unlock_in_child)
    ast.parse = guarded  # type: ignore[assignment]  # same signature, serialised
