"""``bmuf``: block momentum (Chen & Huo 2016). G = avg - w_sent; D <- eta D + zeta G; w <- w + D;
the next models sent are w (classic) or w + eta D (Nesterov). eta=0, zeta=1 is ``average``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpcnn.fit.rules.merge_rule import MergeRule, Range
from gpcnn.fit.rules.rule_registry import register_rule
from gpcnn.kernel.averaging import Vector


@register_rule("bmuf", words="BMUF")
@dataclass
class BlockMomentum(MergeRule):
    eta: float = 0.9
    zeta: float = 1.0
    nesterov: bool = True
    delta: Vector | None = field(default=None, init=False)

    state_layout = "the block momentum D (one model-sized vector)"

    @classmethod
    def option_ranges(cls, segments: int) -> dict[str, Range]:
        return {
            "eta": Range(
                "in [0, 1) (eta >= 1 makes the block momentum diverge)", lambda x: 0 <= x < 1
            ),
            "zeta": Range("> 0 (zeta <= 0 never steps toward the average)", lambda x: x > 0),
        }

    def start(self, weights, keys) -> None:
        super().start(weights, keys)
        assert self.center is not None  # set by MergeRule.start
        self.delta = np.zeros_like(self.center)

    def sent(self, keys) -> Vector:
        assert self.center is not None and self.delta is not None  # set by start or restore
        if not self.nesterov:
            return self.center
        return np.where(self.trainable, self.center + self.eta * self.delta, self.center).astype(
            np.float32
        )

    def sends_model(self) -> bool:
        return not self.nesterov  # Nesterov sends centre + eta * delta

    def update(self, average, segments, counts, **extras) -> None:
        step = np.asarray(average, np.float64) - self.sent(())  # G = avg - w_sent
        assert self.center is not None and self.delta is not None  # checked by sent
        self.delta = (self.eta * self.delta + self.zeta * step).astype(np.float32)
        self.delta[~self.trainable] = 0
        moved = self.center + self.delta
        self.center = np.where(self.trainable, moved, average).astype(np.float32)

    def state(self) -> Vector | None:
        return self.delta

    def restore(self, model, state, segments) -> None:
        super().restore(model, state, segments)
        self.delta = np.zeros_like(self.center) if state is None else np.array(state, np.float32)
