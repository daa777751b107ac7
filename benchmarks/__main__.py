"""Run the benchmarks: ``python -m benchmarks [uncontended]``."""

from __future__ import annotations

import argparse

from . import asyncio_bench, quorum_bench, uncontended


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--cycles", type=int, default=2000, help="cycles per round")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    args = parser.parse_args()
    print("## Uncontended acquire+release (median of interleaved rounds)\n")
    print(uncontended.report(uncontended.measure(args.cycles, args.rounds)))
    print("\n## asyncio\n")
    print(asyncio_bench.report(*asyncio_bench.measure(args.cycles // 2, args.rounds)))
    print("\n## Redlock quorum (uncontended @locked)\n")
    print(quorum_bench.report(quorum_bench.measure(args.cycles // 2, args.rounds)))


if __name__ == "__main__":
    main()
