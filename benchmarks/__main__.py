"""Run the benchmarks: ``python -m benchmarks [uncontended]``."""

from __future__ import annotations

import argparse

from . import uncontended


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--cycles", type=int, default=2000, help="cycles per round")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    args = parser.parse_args()
    print("## Uncontended acquire+release (median of interleaved rounds)\n")
    print(uncontended.report(uncontended.measure(args.cycles, args.rounds)))


if __name__ == "__main__":
    main()
