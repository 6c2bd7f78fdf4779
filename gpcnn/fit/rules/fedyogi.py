"""``fedyogi``: ``fedadam`` with Yogi's second moment (Reddi et al. 2021)."""

from __future__ import annotations

import numpy as np

from gpcnn.fit.rules.fedadam import FedAdam
from gpcnn.fit.rules.rule_registry import register_rule


@register_rule("fedyogi")
class FedYogi(FedAdam):
    """Yogi's second moment: v moves towards G^2 by at most (1 - b2) G^2, additively."""

    def second_moment(self, v, g2):
        return v - (1 - self.beta2) * g2 * np.sign(v - g2)
