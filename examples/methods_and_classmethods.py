"""Lock names from `self` and `cls`, decorators inside or outside @classmethod/@staticmethod,
and re-entrancy: a nested call of a name the thread already holds just counts."""

from __future__ import annotations

import redis

from redlock_deco import Lock, locked, register_provider
from redlock_deco.testing import redis_url


class Account:
    def __init__(self, account_id: int, client: redis.Redis) -> None:
        self.id = account_id
        self.client = client

    @locked("acct:{self.id}")
    def withdraw(self, amount: int) -> int:
        balance = int(self.client.get(f"balance:{self.id}") or 100) - amount
        self.client.set(f"balance:{self.id}", balance)
        self.audit(f"withdrew {amount}")  # re-enters acct:{id}: no deadlock, no round trip
        return balance

    @locked("acct:{self.id}")
    def audit(self, message: str) -> None:
        print(f"  [{Lock(f'acct:{self.id}').owned() and 'held'}] account {self.id}: {message}")

    @classmethod
    @locked("{cls.__name__}:open")
    def open_many(cls, client: redis.Redis, count: int) -> list[Account]:
        return [cls(i, client) for i in range(count)]

    @locked("ledger:{day}")  # outside @staticmethod works too
    @staticmethod
    def close_day(day: str) -> str:
        return f"closed {day}"


def main() -> int:
    with redis_url() as url:
        register_provider("default", url)
        client = redis.Redis.from_url(url)
        accounts = Account.open_many(client, 2)
        print("lock keys come from the arguments:")
        print("  balance after withdraw:", accounts[1].withdraw(30))
        print(" ", Account.close_day("2026-11-21"))
        client.delete("balance:1")
        left = client.dbsize()
    print(f"keys left behind: {left}")
    return 0 if left == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
