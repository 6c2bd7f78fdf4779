"""``fednova``: FedNova (Wang et al. 2020, "Tackling the objective inconsistency problem in
heterogeneous federated optimization"). With one epoch per merge a large shard takes more local
steps than a small one, and the plain average then drifts towards the large shards' objective;
FedNova normalizes each segment's step by how much its optimizer accumulated:

    wbar = w_start - server_lr * tau_eff * sum_k p_k (w_start - w_k) / a_k,
    tau_eff = sum_k p_k a_k,   p_k = n_k / N,

where a_k is segment k's tau_k optimizer steps (its mini-batches times the local epochs, as it
ran them), corrected for SGD's momentum rho (each gradient enters the step with the weight
1 + rho + ... of the steps after it): a_k = [tau_k - rho (1 - rho^tau_k) / (1 - rho)] / (1 - rho),
and tau_k + rho times that with Nesterov's momentum; plain tau_k for any other optimizer, whose
steps are not linear in the gradients. The correction supposes that every segment starts each
iteration with a fresh optimizer state (``optimizer_state="reset"``, the default). The sum is
not the image-weighted one the database streams, so the rule takes each segment's model back.
Non-trainable weights (BatchNorm statistics) take the average, as with every rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpcnn.fit.rules.merge_rule import SERVER_LR, MergeRule, Range, trainable_step
from gpcnn.fit.rules.rule_registry import register_rule


def momentum_of(optimizer: Mapping | None) -> tuple[float, bool]:
    """(rho, nesterov) of SGD as Keras serializes it; (0, False) for any other optimizer or none
    given."""
    if optimizer is None or str(optimizer.get("class_name", "")).lower() != "sgd":
        return 0.0, False
    config = optimizer.get("config", {})
    return float(config.get("momentum", 0.0)), bool(config.get("nesterov", False))


def normalizer(steps: int, rho: float = 0.0, nesterov: bool = False) -> float:
    """a: the sum over ``steps`` SGD steps of the weight each gradient has in their total step
    (``steps`` without momentum)."""
    if rho == 0:
        return float(steps)
    classic = (steps - rho * (1 - rho**steps) / (1 - rho)) / (1 - rho)
    return steps + rho * classic if nesterov else classic


@register_rule("fednova", words="FedNova")
@dataclass
class FedNova(MergeRule):
    """FedNova: each segment's step normalized by its number of local steps (``merge`` gives
    them), with the momentum's correction; ``server_lr`` scales the merged step (1: the paper's)."""

    server_lr: float = 1.0

    @classmethod
    def option_ranges(cls, segments: int) -> dict[str, Range]:
        return {"server_lr": SERVER_LR}

    @property
    def needs_segments(self) -> bool:
        return True

    def normalizers(self) -> dict[int, float]:
        """a_k of every segment of the merge under way."""
        rho, nesterov = momentum_of(self.optimizer)
        return {k: normalizer(n, rho, nesterov) for k, n in self.steps.items()}

    def update(self, average, segments, counts, **extras) -> None:
        assert self.center is not None  # set by start or restore
        a = self.normalizers()
        total = sum(int(counts[k]) for k in segments)
        start = self.center.astype(np.float64)
        tau_eff = sum(int(counts[k]) * a[k] for k in segments) / total
        step = sum(
            (int(counts[k]) / a[k]) * (start - np.asarray(w, np.float64))
            for k, w in segments.items()
        )
        moved = start - self.server_lr * tau_eff * step / total
        self.center = trainable_step(self, moved, average)
