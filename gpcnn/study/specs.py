"""``RunSpec``: one run of the convergence study, and the name its outputs are kept under."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunSpec:
    """One run of the study. ``skew`` is label-skew's Dirichlet alpha (None: IID segments);
    ``scale_lr`` multiplies the learning rate by K (the linear scaling rule)."""

    dataset: str
    merge: str
    segments: int
    merges_per_epoch: int
    iterations: int
    model: str = "small-cnn"
    learning_rate: float = 0.05
    batch_size: int = 32
    seed: int = 0
    shuffle: bool = False
    optimizer: str = "sgd"
    optimizer_state: str = "reset"
    skew: float | None = None
    scale_lr: bool = False

    @property
    def setting(self) -> str:
        """The name without the seed: runs of one setting differ only by their seed."""
        name = f"{self.dataset}-{self.merge}-k{self.segments}-m{self.merges_per_epoch}"
        extras = [
            "shuffled" if self.shuffle else "",
            self.model if self.model != "small-cnn" else "",
            self.optimizer if self.optimizer != "sgd" else "",
            f"os-{self.optimizer_state}" if self.optimizer_state != "reset" else "",
            f"skew{self.skew:g}" if self.skew is not None else "",
            "lrxk" if self.scale_lr else "",
        ]
        return "-".join([name, *(e for e in extras if e)])

    @property
    def name(self) -> str:
        return self.setting if self.seed == 0 else f"{self.setting}-s{self.seed}"

    @property
    def effective_learning_rate(self) -> float:
        return self.learning_rate * (self.segments if self.scale_lr else 1)
