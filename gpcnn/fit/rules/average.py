"""``average``: MADlib's rule, w <- sum(n_k w_k) / sum(n_k), the weighted average of ALL weights
(BatchNorm's moving statistics too, unless ``batchnorm_statistics="pooled"``), streamed inside
the database."""

from __future__ import annotations

from gpcnn.fit.rules.merge_rule import POOLED, MergeRule
from gpcnn.fit.rules.rule_registry import register_rule
from gpcnn.kernel.averaging import Vector


@register_rule("average")
class Average(MergeRule):
    """MADlib: the next model is the weighted average."""

    def average_buffer(self) -> Vector | None:
        # Pooled statistics make the next model differ from the average at the variances.
        return None if self.batchnorm_statistics == POOLED else self.center
