"""Benchmarks for sglc (run from the repo root, e.g. ``python -m bench.report --quick``)."""
