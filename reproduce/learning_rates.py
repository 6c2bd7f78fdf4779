"""The study's learning rate per optimizer, from the sweep's committed history (reproduce/study.sh sweep).

    .venv/bin/python reproduce/learning_rates.py docs/img/study/sweep            # the table
    .venv/bin/python reproduce/learning_rates.py docs/img/study/sweep momentum   # the chosen rate, alone

Each sweep folder ``<optimizer>-lr<rate>`` holds one worker's run of four epochs; a rate's score is
its mean validation accuracy over the last two epochs (one epoch alone moves by a point or more with
shuffling), and the best score per optimizer wins.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpcnn.study.report import read_csv, sweep_score


def scores(sweep: Path) -> dict[str, dict[float, float]]:
    """optimizer -> learning rate -> mean validation accuracy over the last epochs."""
    found: dict[str, dict[float, float]] = {}
    for folder in sorted(sweep.glob("*-lr*")):
        csv = folder / "history.csv"
        if not csv.exists():
            continue
        optimizer, rate = folder.name.split("-lr")
        found.setdefault(optimizer, {})[float(rate)] = sweep_score(read_csv(csv))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("optimizer", nargs="?")
    args = parser.parse_args()
    found = scores(args.sweep)
    if args.optimizer:
        if args.optimizer not in found:
            raise SystemExit(
                f"no sweep results for {args.optimizer} in {args.sweep}: run the sweep"
            )
        rates = found[args.optimizer]
        print(f"{max(rates, key=rates.get):g}")
        return
    print("| optimizer | learning rate | val. accuracy, mean of epochs 3-4 | chosen |")
    print("|---|---|---|---|")
    for optimizer, rates in found.items():
        best = max(rates, key=rates.get)
        for rate, score in sorted(rates.items()):
            print(f"| {optimizer} | {rate:g} | {score:.4f} | {'yes' if rate == best else ''} |")


if __name__ == "__main__":
    main()
