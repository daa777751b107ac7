"""Benchmarks for redlock-deco: ``python -m benchmarks`` (a script, not a timed test)."""
