"""gpcnn's benchmark suite: one module per benchmark, run by ``bench/run.py`` (see docs/benchmarks.md)."""
