"""``none``: K workers that never merge; each keeps its own model, and the validation follows each
one and their one-shot average."""

from __future__ import annotations

import numpy as np

from gpcnn.fit.rules.merge_rule import SegmentModels
from gpcnn.fit.rules.rule_registry import register_rule


@register_rule("none", words="never merged")
class NoMerge(SegmentModels):
    """K workers that never merge; the evaluated model is their one-shot average."""

    validates_segments = True

    def update(self, average, segments, counts, **extras) -> None:
        self.locals_ = {k: np.array(v, np.float32) for k, v in segments.items()}
        self.center = np.array(average, np.float32)
