"""``trimmed-mean``: the coordinate-wise trimmed mean (Yin et al. 2018, "Byzantine-robust
distributed learning: towards optimal statistical rates"). For every weight the segments' values
are sorted, the ``trim`` fraction of the segments is dropped at each end, and the rest are
averaged by image count. A segment whose rows are corrupted (a bad load into one partition) then
moves no weight further than its nearest kept neighbour; with no segment to drop (trim · K < 1)
it is the average. BatchNorm's moving statistics are trimmed like every weight (a mean of
variances is a variance)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpcnn.fit.rules.merge_rule import MergeRule, Range
from gpcnn.fit.rules.robust import coordinatewise
from gpcnn.fit.rules.rule_registry import register_rule

TRIM = Range(
    "a fraction of the segments in [0, 0.5) dropped at each end", lambda x: 0 <= float(x) < 0.5
)


@register_rule("trimmed-mean", words="trimmed mean")
@dataclass
class TrimmedMean(MergeRule):
    """The coordinate-wise trimmed mean: ``trim`` of the segments dropped at each end of every
    weight's values (``floor(trim · K)`` segments each side), the rest averaged by images."""

    trim: float = 0.25

    @classmethod
    def option_ranges(cls, segments: int) -> dict[str, Range]:
        return {"trim": TRIM}

    @property
    def needs_segments(self) -> bool:
        return True

    def update(self, average, segments, counts, **extras) -> None:
        assert segments is not None  # needs_segments: each segment's model comes back
        cut = int(self.trim * len(segments))
        if cut == 0:
            self.center = np.asarray(average, dtype=np.float32)
            return

        def trimmed(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
            order = np.argsort(values, axis=0, kind="stable")[cut : len(values) - cut]
            kept = np.take_along_axis(values, order, axis=0)
            images = weights[order]
            return (kept * images).sum(axis=0) / images.sum(axis=0)

        self.center = coordinatewise(segments, counts, trimmed)
