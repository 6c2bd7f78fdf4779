"""The forecast law's constants (``gpcnn.fit.forecast.pilot_law``), fitted from the study's stored
runs, and the law scored held out.

    .venv/bin/python reproduce/pilot_law.py

For every run that merges (IID: parts a, f and j at K = 8 and 16; label-skewed: parts c, g and i
at K = 4), the pilot gap x is 100 * (one worker's validation accuracy at epoch 3 - the run's),
against the one-worker run of the same seed (as a user's two pilots would be); where the study
reran the first epochs on their own (part j's and c's, g's ``early`` folders) that rerun is the
pilot. The target is the gap at epoch E against the mean of the one-worker seeds. ``rho(E)`` is
the least-squares ratio sum(x * gap) / sum(x * x) at each E from 4 to 15, and the printed power
law its fit in log-log. Held out: each setting (rule, merges per epoch; for skewed runs each table
draw) is predicted with the ratios fitted on the others.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from gpcnn.fit.forecast import pilot_law

STUDY = Path("docs/img/study")
EPOCHS = range(4, 16)
P = pilot_law.PILOT_EPOCHS


def runs(parts: tuple[str, ...]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for part in parts:
        for path in sorted((STUDY / part / "runs").glob("*.json")):
            found.setdefault(path.stem, json.loads(path.read_text()))
    return found


def accuracy(run: dict, epoch: float) -> float | None:
    return next(
        (r["val_accuracy"] for r in run["history"] if math.isclose(r["epoch"], epoch)), None
    )


def skew_max(run: dict) -> float:
    counts = (run.get("segments") or {}).get("class_counts")
    if not counts:
        return 0.0
    total = [sum(c[j] for c in counts) for j in range(len(counts[0]))]
    images = sum(total)
    return max(
        0.5 * sum(abs(c[j] / sum(c) - total[j] / images) for j in range(len(c))) for c in counts
    )


def main() -> int:
    full = runs(("a", "b", "c", "d", "e", "f", "g", "i", "j"))
    early = runs(("j/early", "c/early", "g/early"))
    singles = {
        r["spec"]["seed"]: r
        for r in full.values()
        if r["spec"]["merge"] == "single"
        and r["spec"]["model"] == "bn-cnn"
        and r["spec"]["optimizer"] == "momentum"
        and r["spec"]["dataset"] == "fashion-mnist"
    }
    reference = {
        e: statistics.fmean(a for s in singles.values() if (a := accuracy(s, e)) is not None)
        for e in range(1, 16)
    }
    points = []  # (group, skewed, S_max, x, {E: gap})
    for name, run in full.items():
        spec = run["spec"]
        if spec["merge"] in ("single", "none", "sync") or spec["model"] != "bn-cnn":
            continue
        if spec["optimizer"] != "momentum" or spec["seed"] not in singles:
            continue
        skewed = spec.get("skew") is not None
        if spec["segments"] not in ((4,) if skewed else (8, 16)):
            continue
        pilot = early.get(name, run)
        x = 100 * (accuracy(singles[spec["seed"]], P) - accuracy(pilot, P))
        gaps = {e: 100 * (reference[e] - a) for e in EPOCHS if (a := accuracy(run, e)) is not None}
        if len(gaps) < len(EPOCHS):
            continue
        group = (
            f"skew{spec['skew']}-seed{spec['seed']}"
            if skewed
            else (f"{spec['merge']}-m{spec['merges_per_epoch']}-{spec.get('merge_options')}")
        )
        points.append((group, skewed, skew_max(run), x, gaps))

    def law(chosen: list) -> tuple[float, float]:
        ratios = {
            e: sum(p[3] * p[4][e] for p in chosen) / sum(p[3] ** 2 for p in chosen) for e in EPOCHS
        }
        slope, intercept = statistics.linear_regression(
            [math.log(e / P) for e in EPOCHS], [math.log(max(ratios[e], 1e-6)) for e in EPOCHS]
        )
        return math.exp(intercept), slope

    for skewed, label in ((False, "IID, K = 8 and 16"), (True, "label-skewed, K = 4")):
        chosen = [p for p in points if p[1] == skewed]
        a, b = law(chosen)
        print(f"{label}: {len(chosen)} runs, rho(E) = {a:.3f} * (E/3)^{b:.3f}")
        for epochs in (8, 15):
            misses, covered = [], 0
            for point in chosen:
                ha, hb = law([p for p in chosen if p[0] != point[0]])
                forecast = ha * (epochs / P) ** hb * point[3]
                miss = point[4][epochs] - forecast
                width = pilot_law.SKEWED_WIDTH if skewed else pilot_law.IID_WIDTH
                covered += abs(miss) <= width[0] + width[1] * abs(forecast)
                misses.append(miss)
            mae = statistics.fmean(abs(m) for m in misses)
            rmse = math.sqrt(statistics.fmean(m * m for m in misses))
            print(
                f"  epoch {epochs}, held out: MAE {mae:.2f} points, RMSE {rmse:.2f}, "
                f"interval covers {covered} of {len(misses)}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
