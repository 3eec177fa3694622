"""Benchmarks: `python -m bench.<name>` from the repository root (`--quick` for a smoke run)."""
