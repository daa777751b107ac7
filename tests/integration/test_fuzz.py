"""Fuzzed inputs (hypothesis): any argument value renders to a key Redis accepts, or fails
with KeyTemplateError naming the function and the field -- never an unrelated exception; names
past 1 KB keep a readable prefix and a hash; bad options fail at decoration time."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from support.samples import FUZZ

from redlock_deco import KeyTemplateError, Lock, locked
from redlock_deco._naming import MAX_NAME_BYTES, bounded


class Odd:
    """An argument whose __str__/__format__/attributes misbehave in one of many ways."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def __format__(self, spec: str) -> Any:
        if self.mode == "raise":
            raise RuntimeError("no formatting for you")
        if self.mode == "not-str":
            return 42  # format() must return str
        if self.mode == "huge":
            return "z" * 5000
        return f"odd-{self.mode}"

    def __getattr__(self, name: str) -> Any:
        if self.mode == "attr-raise":
            raise ZeroDivisionError("attribute access exploded")
        raise AttributeError(name)

    def __repr__(self) -> str:
        raise RuntimeError("repr is broken too")


values = st.one_of(
    st.text(),
    st.text(min_size=900, max_size=3000),
    st.binary(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
    st.sampled_from(["raise", "not-str", "huge", "plain", "attr-raise"]).map(Odd),
)


@locked("fuzz:{value}", wait=1)
def plain(value: Any) -> None: ...


@locked("fuzz:{value.attr}:{value[0]}:{value!r}:{value:>8}", wait=1)
def fancy(value: Any) -> None: ...


@FUZZ
@given(value=values)
def test_any_argument_renders_or_fails_with_key_template_error(value: Any, r: redis.Redis) -> None:
    for function in (plain, fancy):
        error: KeyTemplateError | None = None
        try:
            function(value)  # renders and locks, or fails with our error -- nothing else
        except KeyTemplateError as exc:
            error = exc
        if error is not None:
            assert isinstance(error, ValueError)
            assert "test_fuzz" in str(error) and "{value" in str(error)  # function and field
            assert error.field is not None and error.field.startswith("value")
    assert r.dbsize() == 0  # whatever happened, nothing is left held


@FUZZ
@given(name=st.text(max_size=4000))
def test_names_are_bounded_valid_utf8_and_distinct(name: str, r: redis.Redis) -> None:
    key_name = bounded(name)
    encoded = key_name.encode("utf-8")  # always encodable: lone surrogates are escaped
    assert len(encoded) <= MAX_NAME_BYTES
    if len(name.encode("utf-8", "backslashreplace")) > MAX_NAME_BYTES:
        assert (
            "~sha256:" in key_name
            and key_name[:100]
            == name[:100].encode("utf-8", "backslashreplace").decode("utf-8")[:100]
        )
    with Lock(name, ttl=5, wait=0) as lock:
        assert r.exists(lock.key)
    assert r.dbsize() == 0


@pytest.mark.parametrize("limit", [0, -1, 1.5, "3", None, True])
def test_bad_limits_fail_at_decoration_time(limit: Any) -> None:
    from redlock_deco import limited

    with pytest.raises((TypeError, ValueError)):
        limited("x", limit=limit)
