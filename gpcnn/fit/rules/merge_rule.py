"""The merge rule's interface (``MergeRule``), the base of the rules that keep a model per segment
(``SegmentModels``), and the option ranges that several rules share (``SHARED_RANGES``: the
options every rule takes, such as ``batchnorm_statistics``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from gpcnn.fit.rules import pooling
from gpcnn.kernel import local_steps
from gpcnn.kernel.averaging import Vector


def _no_detail(value: object) -> str:
    return ""


@dataclass(frozen=True)
class Range:
    """A real option's allowed values.

    Parameters
    ----------
    allowed : str
        The values in words, with why (a refusal quotes it).
    test : callable
        Whether a value (a float, or a str for an option whose default is one) is allowed.
    detail : callable, optional
        What a refusal adds about the value given.
    """

    allowed: str
    test: Callable[[Any], bool]  # a float, or a str for an option whose default is one
    detail: Callable[[Any], str] = _no_detail


SERVER_LR = Range("> 0 (the server's step on avg - w_sent)", lambda x: x > 0)
AVERAGED, POOLED = "averaged", "pooled"
# The options of every rule (``MergeRule``'s own fields), with their ranges.
SHARED_RANGES = {
    "batchnorm_statistics": Range(
        f'"{AVERAGED}" (each moving statistic the image-weighted mean) or "{POOLED}" (the moving '
        "variance counts the spread between the segments' means too: the union's variance)",
        lambda x: x in (AVERAGED, POOLED),
    )
}


@dataclass
class MergeRule:
    """The client-side part of a rule. ``start`` once, then per iteration: ``sent`` gives the
    model each segment starts from, ``update`` takes the iteration's result (the in-database
    average, and each segment's model for rules that keep them), ``model`` is what is evaluated.
    ``start`` and ``update`` may keep the start and the average they are given, not copies: a
    model-sized copy is memory the client would hold for nothing. ``state``/``restore`` carry
    what a resumed run needs beyond the stored models.

    A rule's options are its dataclass fields with ``init`` (``trainable`` aside); their defaults
    (``option_defaults``) and the ranges of the real ones (``option_ranges``) are the class's.
    What it adds to every local step in the database are the kernel's hooks
    (``gpcnn.kernel.local_steps``), named with their parameters by ``in_database``; the extras
    they read from each segment's start come from ``start_extras``, those they give back reach
    ``update`` by name.

    Every rule takes ``batchnorm_statistics``: "averaged" (MADlib's, the default) merges each
    BatchNorm layer's moving mean and variance as every other weight, the image-weighted mean;
    "pooled" merges the variance as the union's, sum p_k (var_k + mu_k^2) - mubar^2, which
    needs each segment's model back (``needs_segments``) and the positions of the statistics
    (``statistics``, from ``gpcnn.kernel.layout.moving_statistics``). The fit calls ``merge``,
    which pools them, records the optimizer steps each segment took (``steps``) and calls
    ``update``.

    Parameters
    ----------
    trainable : ndarray of bool
        Which values of the flat weight vector are trainable (the rest merge as the average).
    batchnorm_statistics : {"averaged", "pooled"}
        How BatchNorm moving statistics merge, as above.
    """

    # Each segment keeps a model of its own across iterations: it is sent its own start
    # (``sends_model`` is False) and its trained model is needed back (``needs_segments``).
    per_segment: ClassVar[bool] = False
    validates_segments: ClassVar[bool] = False  # the validation evaluates each segment's model too
    state_layout: ClassVar[str | None] = None  # what ``state()`` holds, in words (run summaries)
    words: ClassVar[str] = ""  # the rule in a figure's legend (``register_rule``)
    trainable: Vector  # bool mask over the flat vector
    batchnorm_statistics: str = AVERAGED
    center: Vector | None = field(default=None, init=False)
    # Positions of the BatchNorm moving means and, index by index, their variances (make_rule).
    statistics: tuple[np.ndarray, np.ndarray] = field(
        default=(np.zeros(0, np.int64), np.zeros(0, np.int64)), init=False
    )
    optimizer: Mapping | None = field(default=None, init=False)  # Keras's serialization
    steps: dict[int, int] = field(default_factory=dict, init=False)  # of the merge under way

    @classmethod
    def option_defaults(cls, segments: int) -> dict[str, Any]:
        """Each option's default for K = ``segments``: the rule's own, then those every rule
        takes (``SHARED_RANGES``)."""
        options = {f.name: f.default for f in fields(cls) if f.init and f.name != "trainable"}
        shared = {name: options.pop(name) for name in SHARED_RANGES}
        return {**options, **shared}

    @classmethod
    def option_ranges(cls, segments: int) -> dict[str, Range]:
        """Each real option's allowed values for K = ``segments``."""
        return {}

    def start(self, weights: Vector, keys: Sequence[int]) -> None:
        self.center = np.asarray(weights, dtype=np.float32)

    def sent(self, keys: Sequence[int]) -> Vector | dict[int, Vector]:
        assert self.center is not None  # set by start or restore
        return self.center

    def start_extras(self, key: int) -> dict[str, Vector]:
        """The extras (``local_steps``' ``sends``, by name) that end segment ``key``'s start."""
        return {}

    @property
    def needs_segments(self) -> bool:
        """Whether ``update`` needs each segment's trained model, not only the average."""
        return self.per_segment or self.batchnorm_statistics == POOLED

    def merge(
        self,
        average: Vector,
        segments: Mapping[int, Vector] | None,
        counts: Mapping[int, int],
        steps: Mapping[int, int],
        **extras: Mapping[int, Vector],
    ) -> None:
        """One iteration's merge, as the fit calls it: ``update`` on the ``average`` whose
        BatchNorm variances are pooled when asked, with ``steps`` (each segment's optimizer
        steps in this iteration: its mini-batches times the local epochs) kept in ``steps``."""
        self.steps = {int(k): int(n) for k, n in steps.items()}
        if self.batchnorm_statistics == POOLED:
            average = pooling.pooled(average, segments, counts, *self.statistics)
        self.update(average, segments, counts, **extras)

    def update(
        self,
        average: Vector,
        segments: Mapping[int, Vector] | None,
        counts: Mapping[int, int],
        **extras: Mapping[int, Vector],
    ) -> None:
        """The next model from the iteration's ``average``, each segment's model (``segments``,
        for rules that keep them), image ``counts``, and each extra the local steps gave back
        (``local_steps``' ``returns``: by name, each segment's)."""
        self.center = np.asarray(average, dtype=np.float32)

    def model(self) -> Vector:
        assert self.center is not None  # set by start or restore
        return self.center

    def sends_model(self) -> bool:
        """Whether every segment starts from exactly ``model()``: then the next start is the
        checkpoint just stored, and nothing needs sending."""
        return not self.per_segment

    def average_buffer(self) -> Vector | None:
        """Where the next average may be written as it arrives: the model, for a rule whose next
        model is that average and that needs its current one no longer once the iteration's
        start is on its way; else None (the rule updates from its current model)."""
        return None

    def state(self) -> Vector | None:
        return None

    def restore(self, model: Vector, state: Vector | None, segments: Mapping[int, Vector]) -> None:
        self.center = np.array(model, dtype=np.float32)

    def in_database(self) -> dict:
        """The local-step hooks of the segments' training loop (``local_steps.LOCAL_STEPS``
        names) with their parameters, in order (``SegmentOptions.with_local_steps``)."""
        return {}

    @property
    def corrects(self) -> bool:
        """Whether its local steps read extras of each segment's own from the start."""
        return bool(local_steps.sends(self.in_database()))


def trainable_step(rule: MergeRule, moved: np.ndarray, average: Vector) -> Vector:
    """The next model: ``moved`` where trainable, the plain average elsewhere (float32)."""
    return np.where(rule.trainable, moved, average).astype(np.float32)


@dataclass
class SegmentModels(MergeRule):
    """Rules where each segment keeps its own model across iterations."""

    per_segment: ClassVar[bool] = True
    locals_: dict[int, Vector] = field(default_factory=dict, init=False)

    def start(self, weights, keys) -> None:
        super().start(weights, keys)
        assert self.center is not None  # set by MergeRule.start
        self.locals_ = {k: self.center.copy() for k in keys}

    def sent(self, keys) -> dict[int, Vector]:
        return self.locals_

    def restore(self, model, state, segments) -> None:
        super().restore(model, state, segments)
        self.locals_ = {k: np.array(v, np.float32) for k, v in segments.items()}
