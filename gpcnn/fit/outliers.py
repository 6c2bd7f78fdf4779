"""A segment far from the others in one iteration: its training loss or its step (the per-segment
diagnostics) measured against the median and spread of the other segments' (a robust score,
leave-one-out, so the odd segment does not widen its own yardstick). What a bad load into one
partition, or a segment whose rows differ from the rest, looks like while a fit runs."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MEASURES = (("loss", "training loss"), ("step", "step"))
# Spreads from the others' median. The study's IID runs reached 13.5 (block momentum's step at
# K = 16, parts i and j's per-segment rows); label-skewed tables reach 100 and more, where the
# skew warning speaks instead (the fit checks segments only on tables it did not warn of).
FAR = 30.0
MIN_SEGMENTS = 3  # with two, neither is "the other one"


@dataclass(frozen=True)
class Outlier:
    """Segment ``key``'s ``measure`` (``value``) against the other segments' ``median``."""

    key: int
    measure: str
    value: float
    median: float
    spreads: float  # |value - median| / the others' spread

    def message(self, iteration: int) -> str:
        return (
            f"iteration {iteration}: segment {self.key}'s {self.measure} {self.value:.3g} is far "
            f"from the other segments' (median {self.median:.3g}, {self.spreads:.0f} spreads "
            "away): its rows may be corrupted or unlike the rest (gpcnn tables show); "
            'merge="trimmed-mean" or "median" keep one such segment from pulling the model'
        )


def outliers(segments: Sequence[dict], far: float = FAR) -> list[Outlier]:
    """The segments (rows of ``key``, ``loss``, ``step``: an iteration's ``per_segment``) whose
    loss or step is more than ``far`` spreads from the others' median. The spread is 1.4826 times
    the others' median absolute deviation, at least 5 % of their median, so that segments that
    agree closely do not flag a small difference."""
    if len(segments) < MIN_SEGMENTS:
        return []
    found = []
    for name, words in MEASURES:
        if any(s.get(name) is None for s in segments):
            continue
        values: dict[int, float] = {int(s["key"]): float(s[name]) for s in segments}
        for key, value in values.items():
            others = [v for k, v in values.items() if k != key]
            median = statistics.median(others)
            deviation = statistics.median(abs(v - median) for v in others)
            spread = max(1.4826 * deviation, 0.05 * abs(median), 1e-12)
            if abs(value - median) > far * spread:
                found.append(Outlier(key, words, value, median, abs(value - median) / spread))
    return found
