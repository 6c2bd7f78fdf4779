"""The merge rule's interface (``MergeRule``), the base of the rules that keep a model per segment
(``SegmentModels``), and the option ranges that several rules share."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from gpcnn.kernel import local_steps
from gpcnn.kernel.averaging import Vector


def _no_detail(value: object) -> str:
    return ""


@dataclass(frozen=True)
class Range:
    """A real option's allowed values: in words, with why (``allowed``), as a test, and what a
    refusal adds about the value given (``detail``)."""

    allowed: str
    test: Callable[[float], bool]
    detail: Callable[[Any], str] = _no_detail


SERVER_LR = Range("> 0 (the server's step on avg - w_sent)", lambda x: x > 0)


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
    ``update`` by name."""

    per_segment: ClassVar[bool] = False  # needs each segment's model back, not only the average
    validates_segments: ClassVar[bool] = False  # the validation evaluates each segment's model too
    state_layout: ClassVar[str | None] = None  # what ``state()`` holds, in words (run summaries)
    words: ClassVar[str] = ""  # the rule in a figure's legend (``register_rule``)
    trainable: Vector  # bool mask over the flat vector
    center: Vector | None = field(default=None, init=False)

    @classmethod
    def option_defaults(cls, segments: int) -> dict[str, Any]:
        """Each option's default for K = ``segments``."""
        return {f.name: f.default for f in fields(cls) if f.init and f.name != "trainable"}

    @classmethod
    def option_ranges(cls, segments: int) -> dict[str, Range]:
        """Each real option's allowed values for K = ``segments``."""
        return {}

    def start(self, weights: Vector, keys: Sequence[int]) -> None:
        self.center = np.asarray(weights, dtype=np.float32)

    def sent(self, keys: Sequence[int]) -> Vector | dict[int, Vector]:
        return self.center

    def start_extras(self, key: int) -> dict[str, Vector]:
        """The extras (``local_steps``' ``sends``, by name) that end segment ``key``'s start."""
        return {}

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
        self.locals_ = {k: self.center.copy() for k in keys}

    def sent(self, keys) -> dict[int, Vector]:
        return self.locals_

    def restore(self, model, state, segments) -> None:
        super().restore(model, state, segments)
        self.locals_ = {k: np.array(v, np.float32) for k, v in segments.items()}
