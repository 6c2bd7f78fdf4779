"""``median``: the coordinate-wise median (Yin et al. 2018, "Byzantine-robust distributed
learning: towards optimal statistical rates"): every weight takes the median of the segments'
values, whatever their image counts, so fewer than half the segments cannot move it beyond the
others' range. BatchNorm's moving statistics take the median too (a median of variances is
one of them, or between two)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpcnn.fit.rules.merge_rule import MergeRule
from gpcnn.fit.rules.robust import coordinatewise
from gpcnn.fit.rules.rule_registry import register_rule


@register_rule("median", words="coordinate-wise median")
@dataclass
class Median(MergeRule):
    """The coordinate-wise median of the segment models."""

    @property
    def needs_segments(self) -> bool:
        return True

    def update(self, average, segments, counts, **extras) -> None:
        assert segments is not None  # needs_segments: each segment's model comes back
        self.center = coordinatewise(segments, counts, lambda values, _: np.median(values, axis=0))
