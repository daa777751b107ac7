"""Module-level decorated callables for the pickling tests (spawned children import them)."""

from __future__ import annotations

from redlock_deco import locked, register_provider


def use(url: str) -> None:
    register_provider("default", url)


@locked("double:{x}")
def double(x: int) -> int:
    return x * 2


class Account:
    id = 1

    @locked("acct:{self.id}")
    def charge(self, amount: int) -> int:
        return amount
