"""Expecting the warning a lock dropped while held gives, and no other.

``pytest.warns`` re-emits every warning it did not match when its block ends, and the suite
turns warnings into errors. A test that calls ``gc.collect()`` inside the block also collects
whatever earlier tests left for the collector, such as a redis-py 5.0 connection's socket,
whose "unclosed <socket ...>" warning then failed an unrelated test (the 3.10 CI leg, once).
This block ignores exactly that noise and re-emits anything else it did not expect.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

DROPPED = "garbage-collected while holding"

# What the collector may print for an earlier test's leftovers: not this test's subject.
_LEFTOVERS = re.compile(r"unclosed (<socket\.socket|transport|event loop)")


@contextmanager
def warns_dropped() -> Iterator[None]:
    """Expect at least one "dropped while held" ResourceWarning inside the block."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    dropped = [
        w for w in caught if issubclass(w.category, ResourceWarning) and DROPPED in str(w.message)
    ]
    assert dropped, f"no {DROPPED!r} ResourceWarning; got {[str(w.message) for w in caught]}"
    for w in caught:
        if w in dropped:
            continue
        if issubclass(w.category, ResourceWarning) and _LEFTOVERS.search(str(w.message)):
            continue
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
