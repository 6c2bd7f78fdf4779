"""The tables of docs/convergence.md, computed from a study's committed history.csv.

    .venv/bin/python reproduce/tables.py docs/img/fashion-mnist/history.csv --target 0.87

One table per number of merges per epoch; per run: validation accuracy after epochs 1, 5, 10, 20,
validation loss at the last epoch, the first epoch at which validation accuracy reached the target,
and the median seconds per iteration. Then, over the last five epochs, each run's mean validation
accuracy and loss and the accuracy's range, and for runs with several merges per epoch the mean between
whole epochs (the stored-order caveat of docs/convergence.md).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from gpcnn.study.experiments import STUDY_RULES
from gpcnn.study.report import read_csv

EPOCHS = (1, 5, 10, 20)


def runs_by_name(rows: list[dict]) -> dict[str, list[dict]]:
    """Runs in the order of the rules, then K, then merges per epoch."""
    runs: dict[str, list[dict]] = {}
    for row in rows:
        runs.setdefault(row["run"], []).append(row)
    order = lambda h: (h[0]["merges_per_epoch"], STUDY_RULES.index(h[0]["merge"]), h[0]["segments"])  # noqa: E731
    return {h[0]["run"]: h for h in sorted(runs.values(), key=order)}


def at_epoch(history: list[dict], epoch: float) -> dict | None:
    return next((r for r in history if abs(r["epoch"] - epoch) < 1e-9), None)


def epochs_to(history: list[dict], target: float) -> str:
    reached = next((r["epoch"] for r in history if r["val_accuracy"] >= target), None)
    return "—" if reached is None else f"{reached:g}"


def table(rows: list[dict], target: float) -> str:
    """One table of the runs with the same number of merges per epoch."""
    head = " | ".join(f"epoch {e}" for e in EPOCHS)
    lines = [
        f"| run | {head} | val loss at {EPOCHS[-1]} | epochs to {target:.0%} | s / iteration |",
        "|---|" + "---|" * (len(EPOCHS) + 3),
    ]
    for history in runs_by_name(rows).values():
        first = history[0]
        label = f"{first['merge']}, K = {first['segments']:g}"
        cells = [at_epoch(history, e) for e in EPOCHS]
        accuracy = ["" if r is None else f"{r['val_accuracy']:.4f}" for r in cells]
        loss = "" if cells[-1] is None else f"{cells[-1]['val_loss']:.4f}"
        seconds = statistics.median(r["seconds"] for r in history)
        lines.append(
            f"| {label} | {' | '.join(accuracy)} | {loss} | {epochs_to(history, target)} "
            f"| {seconds:.1f} |"
        )
    return "\n".join(lines)


def late_table(rows: list[dict], last: int = 5) -> str:
    """Mean and range over the last ``last`` epochs: one noisy end point says little."""
    lines = [
        f"| run | mean val accuracy at the last {last} whole epochs (range) | mean val loss "
        "| mean val accuracy between them |",
        "|---|---|---|---|",
    ]
    for name, history in runs_by_name(rows).items():
        final = history[-1]["epoch"]
        late = [r for r in history if r["epoch"] > final - last]
        between = [r["val_accuracy"] for r in late if r["epoch"] != int(r["epoch"])]
        accuracy = [r["val_accuracy"] for r in late if r["epoch"] == int(r["epoch"])]
        loss = [r["val_loss"] for r in late if r["epoch"] == int(r["epoch"])]
        lines.append(
            f"| {name} | {statistics.mean(accuracy):.4f} ({min(accuracy):.3f}–{max(accuracy):.3f}) "
            f"| {statistics.mean(loss):.4f} | {f'{statistics.mean(between):.4f}' if between else ''} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("history", type=Path)
    parser.add_argument("--target", type=float, default=0.87)
    args = parser.parse_args()
    rows = read_csv(args.history)
    for merges in sorted({row["merges_per_epoch"] for row in rows}):
        print(f"\nmerges per epoch = {merges:g}\n")
        print(table([row for row in rows if row["merges_per_epoch"] == merges], args.target))
    print("\nlast five epochs\n")
    print(late_table(rows))


if __name__ == "__main__":
    main()
