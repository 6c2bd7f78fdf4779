"""``RunSpec``: one run of the convergence study, and the name its outputs are kept under."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def merges_in(schedule: Sequence[int], epochs: int) -> int:
    """Iterations (merges) in ``epochs`` epochs of a merges-per-epoch schedule, the last count
    repeating (as the estimator's ``merges_per_epoch`` list)."""
    return sum(schedule[min(e, len(schedule) - 1)] for e in range(epochs))


def _text(value: float | bool | str) -> str:
    if isinstance(value, bool | str):
        return str(value).lower()
    return f"{value:g}"


@dataclass(frozen=True)
class RunSpec:
    """One run of the study. ``skew`` is label-skew's Dirichlet alpha (None: IID segments);
    ``scale_lr`` multiplies the learning rate by K (the linear scaling rule);
    ``merge_options`` are the rule's options given (the rest are the rule's defaults), as sorted
    (name, value) pairs; ``early_merges`` are the merges per epoch of the first epochs before
    ``merges_per_epoch`` takes over (post-local SGD: ``(8, 8)`` then 1). ``shared_sample``: every
    segment also trains on that fraction of the table, the same images on each
    (``add_shared_sample``). ``from_table``: the
    dataset is a table of images in the database, packed for each run (``own_data``), IID or,
    with ``distribute_by``, with the rows of one value of that column on one segment;
    ``library_model``: the model is a name in the model library."""

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
    merge_options: tuple[tuple[str, float | bool | str], ...] = ()
    early_merges: tuple[int, ...] = ()
    from_table: bool = False
    library_model: bool = False
    shared_sample: float | None = None
    distribute_by: str | None = None

    def __post_init__(self) -> None:
        # A spec read back from its JSON has lists where it was made with tuples.
        options = tuple(sorted((str(k), v) for k, v in dict(self.merge_options).items()))
        object.__setattr__(self, "merge_options", options)
        object.__setattr__(self, "early_merges", tuple(int(m) for m in self.early_merges))

    @property
    def schedule(self) -> tuple[int, ...]:
        """Merges in each epoch, the last repeating: the estimator's ``merges_per_epoch``."""
        return (*self.early_merges, self.merges_per_epoch)

    @property
    def options_text(self) -> str:
        """The given options as the name shows them, e.g. ``mu0.1``."""
        return "-".join(f"{k}{_text(v)}" for k, v in self.merge_options)

    @property
    def setting(self) -> str:
        """The name without the seed: runs of one setting differ only by their seed."""
        merges = "-".join(str(m) for m in self.schedule)
        name = f"{self.dataset}-{self.merge}-k{self.segments}-m{merges}"
        extras = [
            "shuffled" if self.shuffle else "",
            self.model if self.model != "small-cnn" else "",
            self.optimizer if self.optimizer != "sgd" else "",
            f"os-{self.optimizer_state}" if self.optimizer_state != "reset" else "",
            f"skew{self.skew:g}" if self.skew is not None else "",
            f"shared{self.shared_sample:g}" if self.shared_sample is not None else "",
            f"by-{self.distribute_by}" if self.distribute_by is not None else "",
            "lrxk" if self.scale_lr else "",
            self.options_text,
        ]
        return "-".join([name, *(e for e in extras if e)])

    @property
    def name(self) -> str:
        return self.setting if self.seed == 0 else f"{self.setting}-s{self.seed}"

    @property
    def effective_learning_rate(self) -> float:
        return self.learning_rate * (self.segments if self.scale_lr else 1)
