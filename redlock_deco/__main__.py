"""``python -m redlock_deco``: the same as the ``redlock-deco`` command."""

from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
