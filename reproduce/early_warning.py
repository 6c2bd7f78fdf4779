"""The early-warning test of part j: does the drift ratio of a run's first epochs say how
far below one worker it will end?

    .venv/bin/python reproduce/early_warning.py docs/img/study/j/early docs/img/study/i \
        --finals docs/img/study/a docs/img/study/f
    .venv/bin/python reproduce/early_warning.py docs/img/study/j/early docs/img/study/i \
        --finals docs/img/study/a docs/img/study/f --score docs/img/study/j \
        --plot docs/img/study/j/early_warning.png

Every run of the given parts whose history has the diagnostics gives one point: the mean drift
ratio of its epochs 1 to ``--epochs`` against its gap to one worker at epoch 15, in points (one
worker: the mean of part a's ``single`` runs, the first of ``--finals``). A run shorter than 15
epochs (``study.sh j3``'s reruns) takes its final accuracy from the run of the same name in
``--finals``: a pairing per setting and seed, since those reruns are not bit-identical to the runs
they repeat. Printed: ``gpcnn.fit.forecast.gap_law.fit_early_warning`` over all the points, over the
IID runs and over the label-skewed ones (rank correlation, the line, its leave-one-out error).

``--score PART ...``: the line a fit logs (``gpcnn.fit.forecast.early_warning``, fitted on the first parts
before these runs) scored out of sample on every run of these parts with diagnostics: per run its
forecast beside its gap, then the root-mean-square miss, the rank correlation and how many runs
fall within the line's stated error. ``--plot FILE``: every point and the line, in one figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from gpcnn.fit.forecast.early_warning import ERROR, line_gap
from gpcnn.fit.forecast.gap_law import fit_early_warning, spearman

FINAL_EPOCH = 15.0
SINGLE = "fashion-mnist-single-k1-m1-shuffled-bn-cnn-momentum"


def final_accuracy(history: list[dict]) -> float | None:
    return next((r["val_accuracy"] for r in history if r["epoch"] == FINAL_EPOCH), None)


def points(
    parts: list[Path], finals: list[Path], epochs: float
) -> list[tuple[bool, float, float, str]]:
    """(skewed, early drift ratio, final gap in points, run name) of every run with
    diagnostics."""
    single = statistics.fmean(
        final_accuracy(json.loads(path.read_text())["history"])
        for path in (finals[0] / "runs").glob(f"{SINGLE}*.json")
    )
    found = []
    for part in parts:
        for path in sorted((part / "runs").glob("*.json")):
            run = json.loads(path.read_text())
            history = run["history"]
            if history[0].get("drift_ratio") is None:
                continue  # made before the diagnostics, or one worker
            final = final_accuracy(history)
            if final is None:
                final = next(
                    final_accuracy(json.loads(other.read_text())["history"])
                    for other in (f / "runs" / path.name for f in finals)
                    if other.exists()
                )
            early = statistics.fmean(r["drift_ratio"] for r in history if r["epoch"] <= epochs)
            skewed = run["spec"].get("skew") is not None
            found.append((skewed, early, 100.0 * (single - final), path.stem))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", type=Path, help="parts whose runs have diagnostics")
    parser.add_argument(
        "--finals",
        nargs="+",
        type=Path,
        required=True,
        help="parts holding the full runs that short reruns repeat",
    )
    parser.add_argument("--epochs", type=float, default=3.0, help="the early epochs (default 3)")
    parser.add_argument(
        "--score",
        nargs="+",
        type=Path,
        default=[],
        help="parts to score gpcnn's line on, out of sample",
    )
    parser.add_argument("--plot", type=Path, help="a PNG of the points and the line")
    args = parser.parse_args()
    found = points(args.parts, args.finals, args.epochs)
    print("| runs | count | Spearman | the line (gap in points) | leave-one-out error |")
    print("|---|---|---|---|---|")
    for name, chosen in (
        ("all", found),
        ("IID", [p for p in found if not p[0]]),
        ("label-skewed", [p for p in found if p[0]]),
    ):
        warning = fit_early_warning([p[1] for p in chosen], [p[2] for p in chosen])
        print(
            f"| {name} | {warning.runs} | {warning.rank_correlation:.2f} | "
            f"{warning.intercept:+.2f} + {warning.slope:.2f} × drift | "
            f"{warning.leave_one_out_error:.2f} points |"
        )
    scored = points(args.score, args.finals, args.epochs) if args.score else []
    if scored:
        print()
        score(scored)
    if args.plot:
        plot(found, scored, args.plot)


def plot(found: list, scored: list, out: Path) -> None:
    """The fitted runs (IID and skewed apart), the scored ones and gpcnn's line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    drifts = [p[1] for p in found + scored]
    xs = [min(drifts), max(drifts)]
    line = [line_gap(x) for x in xs]
    ax.plot(xs, line, "k-", label="the line a fit logs")
    ax.fill_between(xs, [y - ERROR for y in line], [y + ERROR for y in line], color="0.9", zorder=0)
    for label, chosen, style in (
        ("IID (fitted)", [p for p in found if not p[0]], "o"),
        ("label-skewed (fitted)", [p for p in found if p[0]], "s"),
        ("IID, out of sample", [p for p in scored if not p[0]], "x"),
        ("label-skewed, out of sample", [p for p in scored if p[0]], "+"),
    ):
        if chosen:
            ax.scatter(
                [p[1] for p in chosen], [p[2] for p in chosen], marker=style, label=label, zorder=3
            )
    ax.set_xlabel("mean drift ratio of epochs 1-3")
    ax.set_ylabel("gap to one worker at epoch 15 (points)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def score(found: list[tuple[bool, float, float, str]]) -> None:
    """The committed line's forecast of each run against its gap, and the summary."""
    print("| run | early drift ratio | forecast gap | measured gap | miss |")
    print("|---|---|---|---|---|")
    misses = []
    for _, drift, gap, name in found:
        forecast = line_gap(drift)
        misses.append(gap - forecast)
        print(f"| {name} | {drift:.3f} | {forecast:.2f} | {gap:.2f} | {gap - forecast:+.2f} |")
    rms = statistics.fmean(m * m for m in misses) ** 0.5
    within = sum(abs(m) <= ERROR for m in misses)
    rank = spearman([p[1] for p in found], [p[2] for p in found])
    print(
        f"\n{len(found)} runs: root-mean-square miss {rms:.2f} points (stated error {ERROR}), "
        f"mean miss {statistics.fmean(misses):+.2f}, {within} within ± {ERROR}, "
        f"Spearman {rank:.2f}"
    )


if __name__ == "__main__":
    main()
