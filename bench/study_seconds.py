"""Seconds per epoch of every setting of the study's parts, from one interleaved run (issue 15).

    .venv/bin/python bench/study_seconds.py docs/img/study/a [PART ...] --rounds 3 \
        [--settings NAME,...] --out bench/results/study-seconds.json

docs/convergence.md gives the time to a target accuracy as a setting's epochs to the target (from
the part's committed runs) times its median seconds per epoch from here, so that the rules' times
come from one run on one machine state, not from study runs made hours apart. Each round trains
every setting of the parts (their committed ``runs/*.json`` specs, seed 0) for ``--epochs``
epochs, in the same order in every round; a setting's seconds per epoch are the summed iteration
seconds (training, merge, validation, storing: the history rows' ``seconds``) of its last epoch,
so the segment processes' first trace of the model is left out. The runs go into a temporary
folder and are deleted from the database; the image tables are the study's (loaded on first use).
``study_report.py --seconds`` reads the result.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import tempfile
from pathlib import Path

import gpcnn
from gpcnn.fit import runs
from gpcnn.study import experiments
from gpcnn.study.specs import RunSpec, merges_in


def part_settings(parts: list[Path], only: list[str] | None = None) -> list[RunSpec]:
    """Each setting of the parts once (seed 0), in the parts' order of names; with ``only``,
    just those settings."""
    specs: dict[str, RunSpec] = {}
    for part in parts:
        for path in sorted((part / "runs").glob("*.json")):
            spec = RunSpec(**json.loads(path.read_text())["spec"])
            specs.setdefault(spec.setting, dataclasses.replace(spec, seed=0))
    if only is None:
        return list(specs.values())
    unknown = sorted(set(only) - set(specs))
    if unknown:
        raise SystemExit(
            f"--settings: no runs of {', '.join(unknown)} in {', '.join(map(str, parts))}"
        )
    return [spec for name, spec in specs.items() if name in only]


def epoch_seconds(db, spec: RunSpec, epochs: int, cache: dict) -> float:
    """Seconds of the last of ``epochs`` epochs of ``spec``, its run deleted afterwards."""
    spec = dataclasses.replace(spec, iterations=merges_in(spec.schedule, epochs))
    before = {r["run_id"] for r in runs.list_runs(db)}
    with tempfile.TemporaryDirectory() as out:
        history = experiments.run_one(db, spec, Path(out), data_cache=cache, progress=False)
    runs.delete_runs(db, [r["run_id"] for r in runs.list_runs(db) if r["run_id"] not in before])
    return sum(r["seconds"] for r in history if r["epoch"] > epochs - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("parts", nargs="+", type=Path, help="study part folders")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="per fit; the last one is timed")
    parser.add_argument("--settings", help="comma-separated setting names (default: all)")
    parser.add_argument("--schema", default="gpcnn")
    parser.add_argument("--out", type=Path, default=Path("bench/study-seconds.json"))
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs: at least 2 (the first includes the model's first trace)")
    db = gpcnn.connect(schema=args.schema)
    gpcnn.install(db)
    specs = part_settings(args.parts, args.settings.split(",") if args.settings else None)
    seconds: dict[str, list[float]] = {s.setting: [] for s in specs}
    cache: dict = {}
    for round_ in range(1, args.rounds + 1):
        for spec in specs:
            seconds[spec.setting].append(epoch_seconds(db, spec, args.epochs, cache))
            print(f"round {round_} {spec.setting}: {seconds[spec.setting][-1]:.1f} s", flush=True)
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "parts": [str(p) for p in args.parts],
        "epochs": args.epochs,
        "seconds": seconds,
        "median": {name: statistics.median(values) for name, values in seconds.items()},
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, value in result["median"].items():
        print(f"{name}: {value:.1f} s per epoch (median of {args.rounds})")


if __name__ == "__main__":
    main()
