"""The grammar the hook-shape searches draw from (tests/integration/test_hook_shapes.py, sync;
test_async_hook_shapes.py, asyncio): a subclass's own entry and exit hooks that reach the base's
in one of several ways (``via``, each file's own), enter it once or twice, take a protected step
into the object itself or a partner, and raise before or after the base's; and the statement
that enters the object, and who ends a block that outlives its frame."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given
from hypothesis import strategies as st

LIMIT = 8  # a semaphore's (a weighted entry and a step into itself take three slots)
STEPS = ("none", "self", "partner")  # a protected step inside the entry hook
FAULTS = ("none", "before", "after")  # where a hook raises, around the base's
ENTRIES = ("with", "nested", "by hand", "stack", "generator")
ENDS = ("here", "elsewhere", "leave")  # who ends a stack's or a generator's block


class HookError(Exception):
    """What a shape's hook raises on purpose."""


@dataclass(frozen=True)
class Shape:
    kind: str  # "lock" or "sem"
    via: str
    times: int  # base entries (and exits) per statement
    step: str
    enter_fault: str
    exit_fault: str


def fault(fault: str, where: str, hook: str) -> None:
    """Raise HookError if the shape's ``fault`` is ``where`` (of the ``hook`` hook)."""
    if fault == where:
        raise HookError(f"{hook} hook, {where} the base's")


def shapes(vias: tuple[str, ...], bare: str = "") -> st.SearchStrategy[Shape]:
    """Shapes of the ``vias``; ``bare``: the one with no hooks of its own (nothing else drawn)."""

    @st.composite
    def draw_shape(draw: st.DrawFn) -> Shape:
        kind, via = draw(st.sampled_from(["lock", "sem"])), draw(st.sampled_from(vias))
        if via == bare:
            return Shape(kind, via, 1, "none", "none", "none")
        times = draw(st.sampled_from([1, 2]))
        step = draw(st.sampled_from(STEPS))
        return Shape(kind, via, times, step, *draw(st.tuples(*[st.sampled_from(FAULTS)] * 2)))

    return draw_shape()


# How the object is entered, and who ends a block that outlives its statement's frame.
STATEMENTS = st.sampled_from(ENTRIES).flatmap(
    lambda entry: st.tuples(
        st.just(entry), st.sampled_from(ENDS if entry in ("stack", "generator") else ["here"])
    )
)
SETTINGS: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}


def draws(vias: tuple[str, ...], bare: str = "") -> Any:
    """``@given`` of a shape, a statement and where in it to cut (a fraction of its length)."""
    return given(
        shape=shapes(vias, bare), statement=STATEMENTS, fraction=st.floats(0, 1, exclude_max=True)
    )


@dataclass
class Run:
    """What one statement did."""

    shape: Shape
    entry: str
    end: str
    name: str
    observed: list[int] = field(default_factory=list)  # the depth of each body that ran
    raised: BaseException | None = None


@contextlib.contextmanager
def hook_errors_unreported() -> Iterator[None]:
    """A generator dropped inside its block (a cut left it) is closed when collected, and a
    shape's exit hook raising there is "ignored" by Python: reported, not raised. Those
    reports are the shape's doing; any other still reaches the previous hook (pytest's)."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, HookError):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def subclass(base: type[Any], hooks: dict[str, Any], via: str, made: list[type[Any]]) -> Any:
    """A subclass of ``base`` with ``hooks``, its own or (``via`` "mixin") a plain mixin's
    before the primitive; the class the hooks are found on is appended to ``made`` (their
    helper's ``super()`` starts there)."""
    body = {"stepping": False, "partner": None}
    if via == "mixin":
        made.append(type("Mixin", (), hooks))
        return type("Mixed", (made[-1], base), body)
    made.append(type("Shaped", (base,), {**body, **hooks}))
    return made[-1]


def entry_raises(shape: Shape) -> bool:
    """Whether the shape's statement raises at its entry (a step's exit is inside it)."""
    return shape.enter_fault != "none" or (shape.exit_fault != "none" and shape.step != "none")
