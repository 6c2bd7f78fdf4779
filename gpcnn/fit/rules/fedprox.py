"""``fedprox``: ``average`` with the proximal term mu ||w - w_sent||^2 / 2 in every local loss,
whose gradient the segments apply after every batch (the kernel's ``proximal`` hook)."""

from __future__ import annotations

from dataclasses import dataclass

from gpcnn.fit.rules.average import Average
from gpcnn.fit.rules.merge_rule import Range
from gpcnn.fit.rules.rule_registry import register_rule


@register_rule("fedprox")
@dataclass
class FedProx(Average):
    """``average`` with the proximal term mu ||w - w_sent||^2 / 2 in every local loss: the
    segments apply its gradient after every batch (``in_database``); mu = 0 is ``average``."""

    mu: float = 0.01

    @classmethod
    def option_ranges(cls, segments: int) -> dict[str, Range]:
        return {
            "mu": Range(
                ">= 0 (mu = 0 is average; mu < 0 pushes away from the sent model)",
                lambda x: x >= 0,
            )
        }

    def in_database(self) -> dict:
        return {"proximal": self.mu}
