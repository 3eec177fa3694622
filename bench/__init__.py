"""Benchmarks. Each `bench_*.py` module runs alone (`python -m bench.bench_x [--quick]`);
`python -m bench` runs them all. Figures and ratios come from one run, printed."""
