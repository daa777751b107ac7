"""Redlock: a provider that is a list of three independent masters makes every lock use a
quorum. One master goes down and locking goes on; the quorum is what counts."""

from __future__ import annotations

from contextlib import ExitStack

from redlock_deco import Lock, locked, register_provider
from redlock_deco.testing import RedisServer


@locked("payout:{batch}", ttl=10)
def payout(batch: int) -> str:
    return f"batch {batch} paid"


def main() -> int:
    with ExitStack() as stack:
        masters = [stack.enter_context(RedisServer()) for _ in range(3)]
        register_provider("default", [m.url for m in masters])
        print(payout(1))
        with Lock("payout:2") as lock:
            on = [bool(m.client().exists("lock:payout:2")) for m in masters]
            print(f"held on masters: {on}, owned by quorum: {lock.owned()}")
        masters[2].kill()
        print("one master killed:", payout(3))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
