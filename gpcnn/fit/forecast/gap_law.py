"""Predict a study's accuracy gap before it is measured: the gap to one worker as a function of K,
fitted on small K and extrapolated with its uncertainty, and the early-warning fit of the final gap on
the drift ratio of the first epochs.

The gap of a run is ``100 * (mean one-worker validation accuracy - the run's)`` at one epoch, in
points; one point per seed. The growth model is a power law through the origin (K = 1 is one worker:
no gap), ``gap(K) = a * (K - 1) ** p``, fitted by least squares on every seed's gap, with ``p`` on a
grid. Its interval comes from a bootstrap over seeds (each K's seeds drawn with replacement, the
model refitted) plus the noise of the mean of the seeds that will measure it, from the residuals.
Several settings (rules, merge frequencies) can share the exponent: ``fit_gap_models``.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

EXPONENTS = tuple(round(0.25 + 0.05 * i, 2) for i in range(36))  # 0.25 .. 2.0


def settings(rows: Sequence[dict]) -> dict[str, list[list[dict]]]:
    """Setting -> one history per seed, in the rows' order."""
    runs: dict[str, list[dict]] = {}
    for row in rows:
        runs.setdefault(row["run"], []).append(row)
    grouped: dict[str, list[list[dict]]] = {}
    for history in runs.values():
        grouped.setdefault(history[0].get("setting", history[0]["run"]), []).append(history)
    return grouped


def at_epoch(history: Sequence[dict], epoch: float, metric: str) -> float | None:
    """A history's value of ``metric`` at ``epoch`` (None: not recorded then)."""
    for row in history:
        if math.isclose(row["epoch"], epoch) and row.get(metric) is not None:
            return row[metric]
    return None


@dataclass(frozen=True)
class GapPoints:
    """The measured gaps of one rule at one merge frequency: K -> one gap per seed, in points.
    ``early_merges`` is the schedule of a post-local run (e.g. ``"8-8"``), empty for none."""

    rule: str
    merges_per_epoch: float
    gaps: dict[int, tuple[float, ...]]
    early_merges: str = ""


def gap_points(
    rows: Sequence[dict], epoch: float, reference_merge: str = "single"
) -> list[GapPoints]:
    """Every (rule, merges per epoch)'s gaps to the mean of the reference runs at ``epoch``.

    ``rows`` are study history rows (``report.read_csv`` of one or more parts' history.csv), with
    the same dataset, model and optimizer; runs without a row at ``epoch`` are left out.
    """
    by_setting = settings(rows)
    reference = [
        v
        for histories in by_setting.values()
        for h in histories
        if h[0]["merge"] == reference_merge
        if (v := at_epoch(h, epoch, "val_accuracy")) is not None
    ]
    if not reference:
        raise ValueError(
            f"no {reference_merge!r} run reaches epoch {epoch}: nothing to compare with"
        )
    base = statistics.fmean(reference)
    found: dict[tuple[str, float, str], dict[int, list[float]]] = {}
    for histories in by_setting.values():
        for history in histories:
            first = history[0]
            value = at_epoch(history, epoch, "val_accuracy")
            if first["merge"] == reference_merge or value is None:
                continue
            key = (
                first["merge"],
                float(first["merges_per_epoch"]),
                first.get("early_merges") or "",
            )
            found.setdefault(key, {}).setdefault(int(first["segments"]), []).append(
                100.0 * (base - value)
            )
    return [
        GapPoints(rule, merges, {k: tuple(v) for k, v in sorted(gaps.items())}, early)
        for (rule, merges, early), gaps in sorted(found.items())
    ]


def _least_squares(
    groups: Sequence[Sequence[tuple[int, float]]],
) -> tuple[tuple[float, ...], float, float]:
    """``(a per group, p, sse)`` of ``gap = a_g * (K - 1) ** p`` over each group's (K, gap) points,
    one exponent ``p`` on EXPONENTS shared by the groups."""
    best = None
    for p in EXPONENTS:
        scales, sse = [], 0.0
        for points in groups:
            xs = [(k - 1) ** p for k, _ in points]
            a = sum(x * g for x, (_, g) in zip(xs, points, strict=True)) / sum(x * x for x in xs)
            scales.append(a)
            sse += sum((g - a * x) ** 2 for x, (_, g) in zip(xs, points, strict=True))
        if best is None or sse < best[2]:
            best = (tuple(scales), p, sse)
    assert best is not None
    return best


@dataclass(frozen=True)
class GapModel:
    """``gap(K) = a * (K - 1) ** p`` fitted on measured gaps, and bootstrap refits of it."""

    points: GapPoints
    a: float
    p: float
    residual_sd: float
    refits: tuple[tuple[float, float], ...]

    def predict(
        self, segments: int, seeds: int = 2, level: float = 0.9
    ) -> tuple[float, float, float]:
        """The predicted gap at K = ``segments`` and the interval that the mean of ``seeds`` seeds'
        measured gaps should fall in with probability ``level``: (prediction, low, high)."""
        x = segments - 1
        rng = random.Random(0)
        noise = self.residual_sd / math.sqrt(seeds)
        draws = sorted(a * x**p + rng.gauss(0.0, noise) for a, p in self.refits)
        tail = (1.0 - level) / 2.0
        low = draws[int(tail * (len(draws) - 1))]
        high = draws[int((1.0 - tail) * (len(draws) - 1))]
        return self.a * x**self.p, low, high


def fit_gap_models(points: Sequence[GapPoints], draws: int = 2000, seed: int = 0) -> list[GapModel]:
    """Fit the power law to every seed's gap of each setting, one scale ``a`` per setting and one
    exponent ``p`` for all, and ``draws`` bootstrap refits over seeds (every setting's seeds drawn
    again together). A shared exponent lets a setting whose small-K gaps are within noise borrow
    the curvature of one whose gaps are not; with one setting it is that setting's own."""
    groups = [[(k, g) for k, gaps in each.gaps.items() for g in gaps] for each in points]
    for each, group in zip(points, groups, strict=True):
        if len({k for k, _ in group}) < 2:
            raise ValueError(f"{each.rule}: gaps at two values of K at least are needed to fit")
    scales, p, sse = _least_squares(groups)
    dof = max(sum(map(len, groups)) - len(groups) - 1, 1)
    rng = random.Random(seed)
    refits = []
    for _ in range(draws):
        sample = [
            [(k, rng.choice(gaps)) for k, gaps in each.gaps.items() for _ in gaps]
            for each in points
        ]
        refit_scales, refit_p, _ = _least_squares(sample)
        refits.append([(a, refit_p) for a in refit_scales])
    residual_sd = math.sqrt(sse / dof)
    return [
        GapModel(each, scales[i], p, residual_sd, tuple(r[i] for r in refits))
        for i, each in enumerate(points)
    ]


def fit_gap_model(points: GapPoints, draws: int = 2000, seed: int = 0) -> GapModel:
    """Fit the power law to one setting's gaps (its own exponent), and its bootstrap refits."""
    return fit_gap_models([points], draws, seed)[0]


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2.0 + 1.0  # ties share their mean rank
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long sequences (ties get mean ranks)."""
    if len(xs) != len(ys) or len(xs) < 3:
        raise ValueError("spearman needs two sequences of the same length, 3 or more")
    return statistics.correlation(_ranks(xs), _ranks(ys))


@dataclass(frozen=True)
class EarlyWarning:
    """The final gap as a line in the early drift ratio, and how far off it was when each run was
    left out of the fit (its honest error): ``gap ~ intercept + slope * early_drift``."""

    intercept: float
    slope: float
    rank_correlation: float
    leave_one_out_error: float  # root mean square, points
    runs: int

    def expected_gap(self, early_drift: float) -> float:
        """The gap to one worker, in points, that a run with this early drift ratio is on course for."""
        return self.intercept + self.slope * early_drift


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    slope, intercept = statistics.linear_regression(xs, ys)
    return intercept, slope


def fit_early_warning(early_drift: Sequence[float], final_gap: Sequence[float]) -> EarlyWarning:
    """Fit the line, its rank correlation and its leave-one-out error over runs."""
    if len(early_drift) != len(final_gap) or len(early_drift) < 4:
        raise ValueError("the early warning needs 4 runs or more, each with both numbers")
    misses = []
    for i in range(len(early_drift)):
        xs = [x for j, x in enumerate(early_drift) if j != i]
        ys = [y for j, y in enumerate(final_gap) if j != i]
        intercept, slope = _line(xs, ys)
        misses.append(final_gap[i] - (intercept + slope * early_drift[i]))
    intercept, slope = _line(early_drift, final_gap)
    return EarlyWarning(
        intercept,
        slope,
        spearman(early_drift, final_gap),
        math.sqrt(statistics.fmean(m * m for m in misses)),
        len(early_drift),
    )
