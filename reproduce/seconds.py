"""Seconds per epoch of every setting of the study's parts, from one interleaved run.

    .venv/bin/python reproduce/seconds.py docs/img/study/a [PART ...] --rounds 3 \
        [--settings NAME,...] --out docs/img/study/seconds-PART.json

docs/convergence.md gives the time to a target accuracy as a setting's epochs to the target (from
the part's committed runs) times its median seconds per epoch from here, so that the rules' times
come from one run on one machine state, not from study runs made hours apart. Each round trains
every setting of the parts (their committed ``runs/*.json`` specs, seed 0) for ``--epochs``
epochs, in the same order in every round; a setting's seconds per epoch are the summed iteration
seconds (training, merge, validation, storing: the history rows' ``seconds``) of its last epoch,
so the segment processes' first trace of the model is left out. The runs go into a temporary
folder and are deleted from the database; the image tables are the study's (loaded on first use).
``report.py --seconds`` reads the result.

The result is written after every timed fit, so a run killed part-way resumes: started again
with the same parts, settings and ``--epochs``, it keeps the fits ``--out`` already holds and
times only the missing ones, in the same order.

Part h (``--part-h docs/img/study/h``): its configurations under the model hopper, all at once
(one hopper epoch trains every configuration once), and each configuration with each merge rule,
one fit after another; the seconds of the last epoch of each, keyed ``hopper`` and
``<rule> <configuration>``.
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
from gpcnn.study import experiments, hopper_vs_merge
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


def part_h_settings(part: Path) -> dict[str, list[RunSpec]]:
    """Part h's specs per method (``hopper`` and each rule), one per configuration folder, in
    the folders' order."""
    methods: dict[str, list[RunSpec]] = {}
    for folder in sorted(p for p in part.iterdir() if (p / "runs").is_dir()):
        for path in sorted((folder / "runs").glob("*.json")):
            spec = RunSpec(**json.loads(path.read_text())["spec"])
            methods.setdefault(spec.merge, []).append(spec)
    if hopper_vs_merge.HOPPER not in methods:
        raise SystemExit(f"--part-h: no hopper runs in {part}")
    return methods


def _last_epochs(history: list[dict], epochs: int) -> float:
    return sum(r["seconds"] for r in history if r["epoch"] > epochs - 1)


def _deleting_new_runs(db, train):
    """``train()``'s result; the runs it stored are deleted afterwards."""
    before = {r["run_id"] for r in runs.list_runs(db)}
    try:
        return train()
    finally:
        new = [r["run_id"] for r in runs.list_runs(db) if r["run_id"] not in before]
        runs.delete_runs(db, new)


def epoch_seconds(db, spec: RunSpec, epochs: int, cache: dict) -> float:
    """Seconds of the last of ``epochs`` epochs of ``spec``, its run deleted afterwards."""
    spec = dataclasses.replace(spec, iterations=merges_in(spec.schedule, epochs))
    with tempfile.TemporaryDirectory() as out:
        history = _deleting_new_runs(
            db, lambda: experiments.run_one(db, spec, Path(out), data_cache=cache, progress=False)
        )
    return _last_epochs(history, epochs)


def hopper_epoch_seconds(db, specs: list[RunSpec], epochs: int) -> float:
    """Seconds of the last of ``epochs`` hopper epochs of all ``specs`` at once."""
    specs = [dataclasses.replace(spec, iterations=epochs) for spec in specs]
    with tempfile.TemporaryDirectory() as out:
        _deleting_new_runs(
            db, lambda: hopper_vs_merge.run_hopper(db, specs, Path(out), progress=False)
        )
        first = hopper_vs_merge.folder(Path(out), specs[0]) / "runs" / f"{specs[0].name}.json"
        history = json.loads(first.read_text())["history"]
    return _last_epochs(history, epochs)


def _timed_settings(args) -> list[tuple[str, object]]:
    """(name, seconds of one timed fit) for every setting, in the order of each round."""
    if args.part_h is None:
        specs = part_settings(args.parts, args.settings.split(",") if args.settings else None)
        return [
            (s.setting, lambda db, cache, s=s: epoch_seconds(db, s, args.epochs, cache))
            for s in specs
        ]
    methods = part_h_settings(args.part_h)
    hopped = methods.pop(hopper_vs_merge.HOPPER)
    timed = [
        (hopper_vs_merge.HOPPER, lambda db, cache: hopper_epoch_seconds(db, hopped, args.epochs))
    ]
    for method, specs in methods.items():
        for spec in specs:
            name = f"{method} {hopper_vs_merge.folder(Path(), spec).name}"
            timed.append((name, lambda db, cache, s=spec: epoch_seconds(db, s, args.epochs, cache)))
    return timed


def _resumed_seconds(out: Path, parts: list[str], epochs: int, names: list[str]) -> dict:
    """The seconds ``out`` holds from an earlier, killed run of the same timing, else none."""
    seconds: dict[str, list[float]] = {name: [] for name in names}
    if not out.exists():
        return seconds
    earlier = json.loads(out.read_text())
    if earlier["parts"] != parts or earlier["epochs"] != epochs:
        raise SystemExit(
            f"{out} holds a timing of {earlier['parts']} at {earlier['epochs']} epochs, not of "
            f"{parts} at {epochs}: give another --out, or delete it to start again"
        )
    for name in names:
        seconds[name] = list(earlier["seconds"].get(name, []))
    return seconds


def _write(out: Path, parts: list[str], epochs: int, seconds: dict) -> dict:
    """Writes the timing so far (a whole file at a time, so a kill leaves the last one)."""
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "parts": parts,
        "epochs": epochs,
        "seconds": seconds,
        "median": {name: statistics.median(v) for name, v in seconds.items() if v},
    }
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(result, indent=1) + "\n")
    partial.replace(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("parts", nargs="*", type=Path, help="study part folders")
    parser.add_argument("--part-h", type=Path, help="part h's folder: the hopper against the rules")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="per fit; the last one is timed")
    parser.add_argument("--settings", help="comma-separated setting names (default: all)")
    parser.add_argument("--schema", default="gpcnn")
    parser.add_argument("--out", type=Path, default=Path("docs/img/study/seconds.json"))
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs: at least 2 (the first includes the model's first trace)")
    if not args.parts and args.part_h is None:
        parser.error("give study part folders or --part-h")
    db = gpcnn.connect(schema=args.schema)
    gpcnn.install(db)
    timed = _timed_settings(args)
    parts = [str(p) for p in args.parts or [args.part_h]]
    seconds = _resumed_seconds(args.out, parts, args.epochs, [name for name, _ in timed])
    cache: dict = {}
    for round_ in range(1, args.rounds + 1):
        for name, fit in timed:
            if len(seconds[name]) >= round_:
                continue
            seconds[name].append(fit(db, cache))
            print(f"round {round_} {name}: {seconds[name][-1]:.1f} s", flush=True)
            _write(args.out, parts, args.epochs, seconds)
    result = _write(args.out, parts, args.epochs, seconds)
    for name, value in result["median"].items():
        print(f"{name}: {value:.1f} s per epoch (median of {args.rounds})")


if __name__ == "__main__":
    main()
