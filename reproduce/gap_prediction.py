"""Part j's prediction: the gap to one worker at epoch 15 as a function of K, fitted on
K <= 8 and extrapolated to K = 2 and K = 16 before those runs exist, then scored against them.

    .venv/bin/python reproduce/gap_prediction.py predict docs/img/study/a docs/img/study/f
    .venv/bin/python reproduce/gap_prediction.py score docs/img/study/a docs/img/study/f \
        --measured docs/img/study/j

``predict`` fits ``gap = a_setting * (K - 1) ** p`` (``gpcnn.fit.forecast.gap_law.fit_gap_models``:
one scale per setting, one exponent for the three settings of part j, a bootstrap over seeds for
the interval) on the IID runs of the given parts and prints the prediction table that
docs/convergence.md commits. ``score`` refits the same model on the same runs (the fit is seeded:
the same numbers) and puts each K = 2 and K = 16 setting's measured mean gap beside its interval.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from gpcnn.fit.forecast.gap_law import GapPoints, fit_gap_models, gap_points
from gpcnn.study.report import read_csv

EPOCH = 15.0
# Part j's settings: (rule, merges per epoch).
SETTINGS = (("average", 1.0), ("bmuf", 1.0), ("bmuf", 4.0))
PREDICTED_K = (2, 16)
LEVEL = 0.9


def iid_rows(parts: list[Path]) -> list[dict]:
    """The history rows of every IID run of ``parts`` (a run found in two parts counts once)."""
    rows, seen = [], set()
    for part in parts:
        for row in read_csv(part / "history.csv"):
            if row.get("skew") in (None, "") and (row["run"], row["iteration"]) not in seen:
                seen.add((row["run"], row["iteration"]))
                rows.append(row)
    return rows


def settings_points(rows: list[dict], max_segments: int | None) -> list[GapPoints]:
    found = {(p.rule, p.merges_per_epoch): p for p in gap_points(rows, EPOCH) if not p.early_merges}
    chosen = [found[s] for s in SETTINGS]
    if max_segments is None:
        return chosen
    return [
        GapPoints(
            p.rule, p.merges_per_epoch, {k: g for k, g in p.gaps.items() if k <= max_segments}
        )
        for p in chosen
    ]


def label(points: GapPoints) -> str:
    return f"{points.rule} at {points.merges_per_epoch:g} merge(s) per epoch"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "action", choices=["predict", "score"], help="print or score the prediction"
    )
    parser.add_argument("parts", nargs="+", type=Path, help="the study parts fitted on (K <= 8)")
    parser.add_argument("--measured", type=Path, help="the part whose runs score it (score only)")
    args = parser.parse_args()
    models = fit_gap_models(settings_points(iid_rows(args.parts), max_segments=8))
    print(
        f"gap(K) = a * (K - 1) ** p, shared p = {models[0].p:g}, residual sd "
        f"{models[0].residual_sd:.2f} points; {LEVEL:.0%} intervals for the mean of 2 seeds\n"
    )
    measured = {}
    if args.action == "score":
        if args.measured is None:
            parser.error("score needs --measured PART")
        rows = iid_rows([*args.parts, args.measured])
        measured = {(p.rule, p.merges_per_epoch): p.gaps for p in settings_points(rows, None)}
    head = "| setting | a | fitted on (K: gaps, points) |"
    head += "".join(
        f" K = {k} predicted |" + (f" K = {k} measured |" if measured else "") for k in PREDICTED_K
    )
    print(head)
    print("|---" * head.count(" |") + "|")
    for model in models:
        points = model.points
        fitted = "; ".join(
            f"{k}: " + ", ".join(f"{g:.2f}" for g in gaps) for k, gaps in points.gaps.items()
        )
        cells = [label(points), f"{model.a:.3f}", fitted]
        for k in PREDICTED_K:
            value, low, high = model.predict(k, seeds=2, level=LEVEL)
            cells.append(f"{value:.2f} [{low:.2f}, {high:.2f}]")
            if measured:
                gaps = measured[(points.rule, points.merges_per_epoch)].get(k)
                if gaps:
                    mean = statistics.fmean(gaps)
                    verdict = "inside" if low <= mean <= high else "outside"
                    cells.append(f"{mean:.2f} ({len(gaps)} seeds, {verdict})")
                else:
                    cells.append("not run")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
