"""The one interface every benchmark implements, and what a run of one returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Table:
    """One table of a benchmark's section in docs/benchmarks.md."""

    caption: str
    columns: list[str]
    rows: list[list[Any]]


@dataclass
class Target:
    """A target, the value measured against it, and whether it is met (None: not measured)."""

    target: str
    value: str
    met: bool | None


@dataclass
class Outcome:
    """What a benchmark's run gives the runner: its tables and targets for the report, and the
    raw measurements (every round) kept in its result file. ``skipped`` says why it did not run."""

    tables: list[Table] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None


@dataclass
class Context:
    """What the runner hands a benchmark: its parameters (defaults, ``--quick``'s and the
    command line's, merged) and the databases named on the command line."""

    parameters: dict[str, Any]
    database: str | None = None
    greenplum: str | None = None

    def __getitem__(self, name: str) -> Any:
        return self.parameters[name]


@dataclass
class Benchmark:
    """A benchmark: the question it answers, its method in a sentence or two, its parameters
    (``quick``: the overrides of a short check that it works) and ``run``."""

    name: str
    title: str
    question: str
    method: str
    defaults: dict[str, Any]
    quick: dict[str, Any]
    run: Callable[[Context], Outcome]


def ratio_target(text: str, ratio: float, limit: float) -> Target:
    """A "ratio ≤ limit" target."""
    return Target(text, f"{ratio:.2f}", ratio <= limit)
