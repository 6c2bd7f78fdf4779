"""The runner's pure parts: a benchmark's parameters from the command line, and the result
file a run of it becomes."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any

from .base import Benchmark, Outcome


def parse_sets(sets: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs, each value JSON (``rounds=3``, ``sizes=[1,25]``) or else a string."""
    found = {}
    for item in sets:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--set {item!r}: expected NAME=VALUE")
        try:
            found[name] = json.loads(value)
        except json.JSONDecodeError:
            found[name] = value
    return found


def parameters(benchmark: Benchmark, quick: bool, sets: dict[str, Any]) -> dict[str, Any]:
    """The defaults, ``quick``'s overrides when asked, then ``sets``; a name the benchmark does
    not have is refused before anything runs."""
    unknown = sorted(set(sets) - set(benchmark.defaults))
    if unknown:
        raise ValueError(
            f"{benchmark.name} has no parameter {', '.join(unknown)}; it has: "
            f"{', '.join(benchmark.defaults)}"
        )
    return {**benchmark.defaults, **(benchmark.quick if quick else {}), **sets}


def command(name: str, quick: bool, sets: list[str], database: bool, greenplum: bool) -> str:
    """The command line that reruns a benchmark (URLs left out: they may hold passwords)."""
    words = [".venv/bin/python bench/run.py", name, *(["--quick"] if quick else [])]
    words += [f"--set {shlex.quote(s)}" for s in sets]  # as a shell reads it back
    words += ["--database URL"] if database else []
    words += ["--greenplum URL"] if greenplum else []
    return " ".join(words)


def result(
    benchmark: Benchmark,
    params: dict[str, Any],
    outcome: Outcome,
    metadata: dict,
    command_line: str,
    notes: str = "",
) -> dict:
    """A result file's content: what ran, where, with what, and what it gave."""
    return {
        "benchmark": benchmark.name,
        "title": benchmark.title,
        "question": benchmark.question,
        "method": benchmark.method,
        "command": command_line,
        "metadata": metadata,
        "parameters": params,
        "notes": notes,
        "skipped": outcome.skipped,
        "targets": [dataclasses.asdict(t) for t in outcome.targets],
        "tables": [dataclasses.asdict(t) for t in outcome.tables],
        "data": outcome.data,
    }


def write(directory: Path, content: dict) -> Path:
    """``content`` written as ``directory/<benchmark>.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{content['benchmark']}.json"
    path.write_text(json.dumps(content, indent=1, ensure_ascii=False) + "\n")
    return path
