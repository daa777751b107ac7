"""Names that cannot work are refused, without a server: template fields that name no
parameter, name callables returning the wrong thing, default reprs (an object's address is
no name), lookalike data that is not a repr, names given twice; long names stay distinct."""

from __future__ import annotations

from typing import Any

import pytest
from support.samples import LOOKALIKE, Opaque

from redlock_deco import (
    KeyTemplateError,
    Lock,
    locked,
)
from redlock_deco._naming import bounded


def test_unknown_field_fails_at_decoration_naming_field_and_parameters() -> None:
    with pytest.raises(KeyTemplateError) as info:

        @locked("order:{order}")
        def charge(order_id: int, amount: int) -> None: ...

    message = str(info.value)
    assert "{order}" in message and "order_id, amount" in message and "charge" in message
    assert isinstance(info.value, ValueError)
    assert info.value.field == "order"


def test_name_callable_must_return_str() -> None:
    @locked(lambda n: n)
    def f(n: int) -> None: ...

    with pytest.raises(KeyTemplateError, match="returned int"):
        f(1)


def test_missing_argument_is_pythons_own_type_error() -> None:
    @locked("o:{a}")
    def f(a: int) -> None: ...

    with pytest.raises(TypeError, match="missing a required argument: 'a'"):
        f()  # type: ignore[call-arg]


def test_name_callable_returning_a_default_repr_is_refused() -> None:
    @locked(lambda user: f"u:{user}")
    def f(user: Any) -> None: ...

    with pytest.raises(KeyTemplateError, match="default repr"):
        f(Opaque())


def test_an_object_beside_lookalike_data_is_still_refused() -> None:
    @locked("t:{title}:{items}")
    def f(title: str, items: list[Any]) -> None: ...

    with pytest.raises(KeyTemplateError, match="default repr") as info:
        f(LOOKALIKE, [LOOKALIKE, Opaque()])
    assert info.value.field == "items"

    @locked(lambda title, user: f"t:{title}:{user}")
    def g(title: str, user: Any) -> None: ...

    with pytest.raises(KeyTemplateError, match="default repr"):
        g(LOOKALIKE, Opaque())


def test_fixed_name_holding_a_default_repr_is_refused_at_decoration() -> None:
    for template in ("stuck <Opaque object at 0x7f00aa>", "{n}:<Opaque object at 0x7f00aa>"):
        with pytest.raises(KeyTemplateError, match="default repr"):

            @locked(template)
            def f(n: int) -> None: ...


def test_long_names_that_share_a_prefix_stay_distinct() -> None:
    a, b = "p" * 2000 + "a", "p" * 2000 + "b"
    assert bounded(a) != bounded(b) and bounded(a).startswith("p" * 900)
    assert bounded(a) == bounded(a)  # deterministic: every process computes the same key


def test_names_must_all_be_templates_or_callables() -> None:
    with pytest.raises(TypeError, match="several lock names"):
        locked("a", None)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="once"):
        locked("a", "b", name="c")


def test_a_primitive_name_holding_a_default_repr_is_refused() -> None:
    with pytest.raises(KeyTemplateError, match="default repr"):
        Lock(f"order:{object()}")


def test_name_given_twice_or_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="once"):
        locked("a", name="b")
    with pytest.raises(TypeError, match="a name must be a str template"):
        locked(42)  # type: ignore[call-overload]


def test_a_primitive_name_that_is_no_str_or_empty_is_refused_saying_what_to_write() -> None:
    """Review 61, F3: ``Lock(None)`` failed inside with "argument of type 'NoneType' is not
    iterable", ``Lock(b"...")`` said a bytes-like object was required, and ``@locked("")``
    was one key, ``lock:``, for every function so decorated."""
    import redlock_deco.asyncio as aio
    from redlock_deco import Semaphore, Throttle, locked

    for make in (
        lambda: Lock(None),  # type: ignore[arg-type]
        lambda: Lock(7),  # type: ignore[arg-type]
        lambda: Semaphore(None, limit=2),  # type: ignore[arg-type]
        lambda: aio.Lock(None),  # type: ignore[arg-type]
        lambda: Throttle(None, rate=1),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match="name must be a str, got"):
            make()
    with pytest.raises(TypeError, match=r"name must be a str, got bytes .*decode"):
        Lock(b"order:7")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must not be empty"):
        locked("")  # (a fixed name: one key, ``lock:``, for every function so decorated)
    assert Lock("").key == "lock:"  # (a primitive's name may come from data, as a rendered one)
