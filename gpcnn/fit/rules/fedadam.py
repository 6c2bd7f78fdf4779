"""``fedadam``: Adam on the pseudo-gradient G = avg - w_sent, in the client (Reddi et al. 2021)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpcnn.fit.rules.merge_rule import SERVER_LR, MergeRule, Range, trainable_step
from gpcnn.fit.rules.rule_registry import register_rule
from gpcnn.kernel.averaging import Vector


@register_rule("fedadam")
@dataclass
class FedAdam(MergeRule):
    """Adam on the pseudo-gradient G = avg - w_sent, in the client (Reddi et al. 2021)."""

    server_lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 0.001
    moments: Vector | None = field(default=None, init=False)  # m, then v

    state_layout = "m, then v (two model-sized vectors)"

    @classmethod
    def option_ranges(cls, segments: int) -> dict[str, Range]:
        return {
            "server_lr": SERVER_LR,
            "beta1": Range("in [0, 1) (the first moment's decay)", lambda x: 0 <= x < 1),
            "beta2": Range("in [0, 1) (the second moment's decay)", lambda x: 0 <= x < 1),
            "tau": Range(
                "> 0 (the adaptivity: it keeps sqrt(v) + tau away from 0)", lambda x: x > 0
            ),
        }

    def start(self, weights, keys) -> None:
        super().start(weights, keys)
        assert self.center is not None  # set by MergeRule.start
        size = self.center.size
        self.moments = np.concatenate(
            [np.zeros(size, np.float32), np.full(size, self.tau**2, np.float32)]
        )

    def second_moment(self, v: np.ndarray, g2: np.ndarray) -> np.ndarray:
        return self.beta2 * v + (1 - self.beta2) * g2

    def update(self, average, segments, counts, **extras) -> None:
        assert self.center is not None and self.moments is not None  # set by start or restore
        g = np.asarray(average, np.float64) - self.center
        m, v = np.split(self.moments.astype(np.float64), 2)
        m = self.beta1 * m + (1 - self.beta1) * g
        v = self.second_moment(v, g * g)
        m[~self.trainable], v[~self.trainable] = 0, self.tau**2
        self.moments = np.concatenate([m, v]).astype(np.float32)
        moved = self.center + self.server_lr * m / (np.sqrt(v) + self.tau)
        self.center = trainable_step(self, moved, average)

    def state(self) -> Vector | None:
        """m, then v: two model-sized vectors."""
        return self.moments

    def restore(self, model, state, segments) -> None:
        super().restore(model, state, segments)
        self.moments = np.array(state, np.float32)
