"""``scaffold``: SCAFFOLD (Karimireddy et al. 2020). The server's control variate c and each
segment's c_i; each segment is sent the model and its correction c - c_i, which it subtracts
(times the learning rate) after every batch, and gives back its new c_i+ (the kernel's
``correction`` hook)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from gpcnn.fit.rules.merge_rule import SERVER_LR, MergeRule, Range, trainable_step
from gpcnn.fit.rules.rule_registry import register_rule
from gpcnn.kernel.averaging import Vector


@register_rule("scaffold")
@dataclass
class Scaffold(MergeRule):
    """SCAFFOLD: the server's control variate c and each segment's c_i (zero at the start,
    and zero on non-trainable positions); each segment is sent the model and c - c_i."""

    per_segment: ClassVar[bool] = True
    state_layout = "c, then each segment's c_i in key order ((K + 1) model-sized vectors)"
    server_lr: float = 1.0
    control: Vector | None = field(default=None, init=False)
    controls: dict[int, Vector] = field(default_factory=dict, init=False)

    @classmethod
    def option_ranges(cls, segments: int) -> dict[str, Range]:
        return {"server_lr": SERVER_LR}

    def start(self, weights, keys) -> None:
        super().start(weights, keys)
        assert self.center is not None  # set by MergeRule.start
        self.control = np.zeros_like(self.center)
        self.controls = {k: np.zeros_like(self.center) for k in sorted(keys)}

    def correction(self, key: int) -> Vector:
        """c - c_i: what segment ``key`` subtracts, times the learning rate, after every batch."""
        assert self.control is not None  # set by start or restore
        return (self.control - self.controls[key]).astype(np.float32)

    def start_extras(self, key: int) -> dict[str, Vector]:
        return {"correction": self.correction(key)}

    def update(self, average, segments, counts, **extras: Mapping[int, Vector]) -> None:
        # MergeRule's signature takes any extras; this rule takes the one its hook gives back.
        self._update(average, segments, counts, **extras)

    def _update(self, average, segments, counts, *, controls: Mapping[int, Vector]) -> None:
        assert self.center is not None and self.control is not None  # set by start or restore
        total = sum(counts.values())
        change = sum(
            counts[k] * (np.asarray(c, np.float64) - self.controls[k]) for k, c in controls.items()
        )
        self.control = (self.control + change / total).astype(np.float32)
        self.controls = {k: np.array(controls[k], np.float32) for k in sorted(controls)}
        moved = self.center + self.server_lr * (np.asarray(average, np.float64) - self.center)
        self.center = trainable_step(self, moved, average)

    def state(self) -> Vector:
        """c, then every segment's c_i in key order: (K + 1) model-sized vectors."""
        return np.concatenate([self.control, *self.controls.values()])

    def restore(self, model, state, segments) -> None:
        super().restore(model, state, segments)
        parts = np.split(np.asarray(state, np.float32), len(segments) + 1)
        self.control = parts[0].copy()
        self.controls = {k: p.copy() for k, p in zip(sorted(segments), parts[1:], strict=True)}

    def in_database(self) -> dict:
        return {"correction": True}
