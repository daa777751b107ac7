"""Name templates: the binding matrix, end to end (the key seen in Redis during the call),
and every bad template rejected at decoration time."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from support.samples import LOOKALIKE, Opaque

from redlock_deco import KeyTemplateError, locked


def keys_during(r: redis.Redis) -> list[str]:
    return sorted(k.decode() for k in r.keys("lock:*"))


@dataclass
class Org:
    id: int


@dataclass
class User:
    org: Org
    name: str


def test_positional_keyword_and_default_arguments(r: redis.Redis) -> None:
    @locked("order:{order_id}:{currency}")
    def charge(order_id: int, amount: int, currency: str = "EUR") -> list[str]:
        return keys_during(r)

    assert charge(7, 10) == ["lock:order:7:EUR"]
    assert charge(order_id=8, amount=1, currency="USD") == ["lock:order:8:USD"]
    assert charge(9, amount=1) == ["lock:order:9:EUR"]
    assert r.dbsize() == 0


def test_attribute_index_and_format_spec(r: redis.Redis) -> None:
    @locked("{user.org.id}:{items[0]}:{user.name!r}:{n:03d}")
    def f(user: User, items: list[str], n: int) -> list[str]:
        return keys_during(r)

    assert f(User(Org(42), "ann"), ["a", "b"], 5) == ["lock:42:a:'ann':005"]


def test_keyword_only_varargs_and_varkw(r: redis.Redis) -> None:
    @locked("{args[1]}:{region}:{opts[mode]}")
    def f(*args: Any, region: str = "eu", **opts: Any) -> list[str]:
        return keys_during(r)

    assert f("x", "y", mode="fast") == ["lock:y:eu:fast"]
    assert f("x", "z", region="us", mode="slow") == ["lock:z:us:slow"]


def test_positional_only_parameter(r: redis.Redis) -> None:
    @locked("p:{a}:{b}")
    def f(a: int, /, b: int = 2) -> list[str]:
        return keys_during(r)

    assert f(1) == ["lock:p:1:2"]


class Account:
    prefix = "acct"

    def __init__(self, id: int) -> None:
        self.id = id

    @locked("acct:{self.id}")
    def method(self, r: redis.Redis) -> list[str]:
        return keys_during(r)

    @classmethod
    @locked("{cls.__name__}:{key}")
    def class_inner(cls, r: redis.Redis, key: str) -> list[str]:
        return keys_during(r)

    @locked("{cls.prefix}:outer:{key}")
    @classmethod
    def class_outer(cls, r: redis.Redis, key: str) -> list[str]:
        return keys_during(r)

    @staticmethod
    @locked("static:{key}")
    def static_inner(r: redis.Redis, key: str) -> list[str]:
        return keys_during(r)

    @locked("static2:{key}")
    @staticmethod
    def static_outer(r: redis.Redis, key: str) -> list[str]:
        return keys_during(r)


def test_methods_classmethods_staticmethods_both_orders(r: redis.Redis) -> None:
    acct = Account(5)
    assert acct.method(r) == ["lock:acct:5"]
    assert Account.method(acct, r) == ["lock:acct:5"]
    assert Account.class_inner(r, "k") == ["lock:Account:k"]
    assert acct.class_inner(r, "k") == ["lock:Account:k"]
    assert Account.class_outer(r, "k") == ["lock:acct:outer:k"]
    assert acct.class_outer(r, key="k") == ["lock:acct:outer:k"]
    assert Account.static_inner(r, "s") == ["lock:static:s"]
    assert acct.static_inner(r, "s") == ["lock:static:s"]
    assert Account.static_outer(r, "t") == ["lock:static2:t"]
    assert acct.static_outer(r, "t") == ["lock:static2:t"]


def test_callable_names_get_the_call_arguments_including_self(r: redis.Redis) -> None:
    def name_of(self: Any, n: int) -> str:
        return f"fn:{self.id}:{n}"

    class Svc:
        id = 3

        @locked(lambda self, n: f"lam:{self.id}:{n}")
        def a(self, n: int) -> list[str]:
            return keys_during(r)

        @locked(name=name_of)
        def b(self, n: int) -> list[str]:
            return keys_during(r)

    assert Svc().a(1) == ["lock:lam:3:1"]
    assert Svc().b(n=2) == ["lock:fn:3:2"]


def test_default_name_is_module_and_qualname(r: redis.Redis) -> None:
    @locked
    def bare() -> list[str]:
        return keys_during(r)

    @locked()
    def empty_parens() -> list[str]:
        return keys_during(r)

    qual = "test_naming.test_default_name_is_module_and_qualname.<locals>"
    assert bare() == [f"lock:{qual}.bare"]
    assert empty_parens() == [f"lock:{qual}.empty_parens"]


def test_custom_prefix(r: redis.Redis) -> None:
    @locked("x:{n}", prefix="app:mutex:")
    def f(n: int) -> list[str]:
        return sorted(k.decode() for k in r.keys("app:*"))

    assert f(1) == ["app:mutex:x:1"]


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("order:{}", "positional field"),
        ("order:{0}", "positional field"),
        ("order:{id", "not a valid str.format template"),
        ("order:{x.y}", "'x' is not a parameter"),
        ("{a:{width}}", "'width' is not a parameter"),
    ],
)
def test_bad_templates(template: str, fragment: str) -> None:
    with pytest.raises(KeyTemplateError, match=fragment.replace(".", r"\.")):

        @locked(template)
        def f(a: int) -> None: ...


def test_render_failure_names_function_and_template(r: redis.Redis) -> None:
    @locked("u:{user.missing}")
    def f(user: User) -> None: ...

    with pytest.raises(KeyTemplateError, match=r"u:\{user\.missing\}.*test_naming.*AttributeError"):
        f(User(Org(1), "x"))
    assert r.dbsize() == 0


# -- bound methods, partials, callable objects: the parameters as the caller passes them --


class Ledger:
    def __init__(self, r: redis.Redis) -> None:
        self.r = r

    def post(self, order_id: int, currency: str = "EUR") -> list[str]:
        return keys_during(self.r)

    def __call__(self, order_id: int, *, currency: str = "EUR") -> list[str]:
        return keys_during(self.r)

    @classmethod
    def find(cls, r: redis.Redis, key: str) -> list[str]:
        return keys_during(r)


def post_order(r: redis.Redis, order_id: int, currency: str = "EUR") -> list[str]:
    return keys_during(r)


def test_bound_method_fields_are_its_own_parameters(r: redis.Redis) -> None:
    # wrapt hands a bound method's __self__ over as `instance`; it must not shift the fields.
    post = locked("order:{order_id}:{currency}")(Ledger(r).post)
    assert post(7) == ["lock:order:7:EUR"]
    assert post(8, currency="USD") == ["lock:order:8:USD"]
    assert post(order_id=9) == ["lock:order:9:EUR"]
    by_callable = locked(lambda order_id, currency="EUR": f"cb:{order_id}")(Ledger(r).post)
    assert by_callable(5) == ["lock:cb:5"]  # the name callable gets no self either


def test_bound_classmethod_fields_are_its_own_parameters(r: redis.Redis) -> None:
    # Ledger.find is bound to the class: wrapt passes the class as `instance`, not a field.
    assert locked("find:{key}")(Ledger.find)(r, "k") == ["lock:find:k"]


def test_partial_fields_are_the_parameters_left_to_pass(r: redis.Redis) -> None:
    post = locked("order:{order_id}:{currency}")(functools.partial(post_order, r))
    assert post(7) == ["lock:order:7:EUR"]
    usd = locked("order:{order_id}:{currency}")(functools.partial(post_order, r, currency="USD"))
    assert usd(8) == ["lock:order:8:USD"]  # a pre-filled keyword renders its value
    assert usd(8, currency="GBP") == ["lock:order:8:GBP"]  # and the caller may override it
    with pytest.raises(KeyTemplateError, match="'r' is not a parameter"):
        locked("{r}")(functools.partial(post_order, r))  # pre-filled positionally: not a field


def test_callable_object_fields_are_its_call_parameters(r: redis.Redis) -> None:
    ledger = locked("order:{order_id}:{currency}")(Ledger(r))
    assert ledger(7) == ["lock:order:7:EUR"]
    assert ledger(8, currency="USD") == ["lock:order:8:USD"]


def test_default_names_of_bound_methods_partials_and_callable_objects(r: redis.Redis) -> None:
    # Deterministic and the same in every process (see test_callable_forms for two processes).
    assert locked()(Ledger(r).post)(1) == ["lock:test_naming.Ledger.post"]
    assert locked(name=None)(functools.partial(post_order, r))(1) == ["lock:test_naming.post_order"]
    assert locked()(Ledger(r))(1) == ["lock:test_naming.Ledger.__call__"]
    assert locked()(Ledger(r).__call__)(1) == ["lock:test_naming.Ledger.__call__"]


@dataclass
class Holder:
    org: Any


@pytest.mark.parametrize(
    ("template", "field"),
    [
        ("u:{user}", "user"),
        ("u:{user!r}", "user"),
        ("u:{user!s:>5}", "user"),
        ("u:{holder.org}", "holder.org"),
        ("u:{items[0]}", "items[0]"),
        ("u:{fn}", "fn"),  # <function ... at 0x...> is a default repr too
    ],
)
def test_default_repr_in_a_field_is_refused_naming_it(
    template: str, field: str, r: redis.Redis
) -> None:
    ran = []

    @locked(template)
    def f(user: Any, holder: Holder, items: list[Any], fn: Any) -> None:
        ran.append(1)

    with pytest.raises(KeyTemplateError, match="default repr") as info:
        f(Opaque(), Holder(Opaque()), [Opaque()], f.__wrapped__)
    assert info.value.field == field and info.value.template == template
    assert f"{{{field}}}" in str(info.value)
    assert ran == [] and r.dbsize() == 0  # refused before taking any lease


def test_objects_with_their_own_str_render_fine(r: redis.Redis) -> None:
    class Org:
        def __str__(self) -> str:
            return "acme"

    @locked("org:{org}")
    def f(org: Org) -> list[str]:
        return keys_during(r)

    assert f(Org()) == ["lock:org:acme"]


@dataclass
class Ticket:
    title: str


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("t:{title}", f"lock:t:{LOOKALIKE}"),
        ("t:{title!r}", f"lock:t:{LOOKALIKE!r}"),
        ("t:{ticket.title}", f"lock:t:{LOOKALIKE}"),
        ("t:{raw}", f"lock:t:{LOOKALIKE.encode()}"),
        ("t:{titles}", f"lock:t:{[LOOKALIKE]}"),
        ("t:{by_title}", f"lock:t:{ {LOOKALIKE: 1} }"),
    ],
)
def test_data_that_looks_like_a_default_repr_renders_as_it_is(
    template: str, expected: str, r: redis.Redis
) -> None:
    @locked(template)
    def f(
        title: str, ticket: Ticket, raw: bytes, titles: list[str], by_title: dict[str, int]
    ) -> list[str]:
        return keys_during(r)

    got = f(LOOKALIKE, Ticket(LOOKALIKE), LOOKALIKE.encode(), [LOOKALIKE], {LOOKALIKE: 1})
    assert got == [expected]


def test_a_name_callable_copying_data_that_looks_like_a_repr_renders_it(r: redis.Redis) -> None:
    @locked(lambda title, n: f"t:{title}:{n}")
    def f(title: str, n: int) -> list[str]:
        return keys_during(r)

    assert f(LOOKALIKE, n=7) == [f"lock:t:{LOOKALIKE}:7"]
