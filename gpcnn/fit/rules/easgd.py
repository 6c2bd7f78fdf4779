"""``easgd``: elastic averaging, synchronous (Zhang, Choromanska & LeCun 2015). Each segment keeps
its own model x_i; centre c: c <- c + alpha sum_i (x_i - c), x_i <- x_i - alpha (x_i - c), both
from the pre-update values; K alpha < 1. The evaluated model is the centre."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpcnn.fit.rules.merge_rule import Range, SegmentModels
from gpcnn.fit.rules.rule_registry import register_rule


@register_rule("easgd", words="EASGD")
@dataclass
class ElasticAveraging(SegmentModels):
    alpha: float = 0.45

    @classmethod
    def option_defaults(cls, segments: int) -> dict[str, Any]:
        return {**super().option_defaults(segments), "alpha": 0.9 / segments}  # K*alpha = 0.9

    @classmethod
    def option_ranges(cls, segments: int) -> dict[str, Range]:
        k = segments
        return {
            "alpha": Range(
                f"> 0 with K*alpha < 1, i.e. in (0, {1 / k:g}) for K={k} segments",
                lambda x: x > 0 and k * x < 1,
                lambda value: f"; here K*alpha = {k} * {value} = {k * value:g}",
            )
        }

    def update(self, average, segments, counts, **extras) -> None:
        assert self.center is not None  # set by start or restore
        old_center = self.center.astype(np.float64)
        pull = sum(np.asarray(x, np.float64) - old_center for x in segments.values())
        center = old_center + self.alpha * pull
        self.center = np.where(self.trainable, center, average).astype(np.float32)
        self.locals_ = {
            k: np.where(
                self.trainable, np.asarray(x, np.float64) - self.alpha * (x - old_center), x
            ).astype(np.float32)
            for k, x in segments.items()
        }
