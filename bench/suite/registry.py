"""The benchmarks by name; each module is imported only when it runs (they load TensorFlow)."""

from __future__ import annotations

import importlib

from .base import Benchmark

#: name -> module under ``bench.suite``, in the report's order
MODULES = {
    "loading": "loading",
    "epoch": "epoch",
    "fixed_cost": "fixed_cost",
    "diagnostics": "diagnostics",
    "predict": "predict",
    "soak": "soak",
    "greenplum": "greenplum",
    "layouts": "layouts",
}


def names() -> list[str]:
    """Every benchmark's name, in the report's order."""
    return list(MODULES)


def get(name: str) -> Benchmark:
    """The benchmark called ``name`` (its module imported now)."""
    if name not in MODULES:
        raise KeyError(f"no benchmark {name!r}; there are: {', '.join(MODULES)}")
    return importlib.import_module(f"{__package__}.{MODULES[name]}").BENCHMARK
