"""An iteration's diagnostics: how far each segment stepped, and how far the segments pulled apart.

Per segment (``SegmentReport``, measured on the segment): images, training loss and metrics,
seconds in its transition, and its step ``||w_k - w_start||``. Across segments, around the
image-weighted average w̄ of the segment models (whatever the rule then makes of it):

- the spread, ``sqrt(sum n_k ||w_k - w̄||^2 / N)``;
- the merged step, ``||w̄ - w_start||`` (with a start per segment, w_start is their
  image-weighted average);
- the drift ratio, spread / merged step (None when the merged step is 0).

Two ways to the same numbers, both in float64 over the weights part of the vectors:
``from_vectors`` with each segment's vector at hand (the rules that keep a model per segment),
directly; ``from_steps`` where only the merge comes back (in the database, or streamed), by
``spread^2 = sum n_k ||w_k - w_start||^2 / N - ||w̄ - w_start||^2``, clamped at 0. That difference
cancels: w̄ comes back rounded to float32 (|δ_i| <= 2^-24 |w̄_i|), so it departs from the direct
spread^2 around that w̄ by at most ``2 ||w̄ - w_start|| ||δ|| + 4 ||δ||^2`` (``cancellation_bound``),
which is small beside spread^2 unless the segments barely drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpcnn.engines.results import SegmentReport
from gpcnn.kernel import averaging

FLOAT32_ROUNDING = 2.0**-24  # a float32 rounding's relative error, at most


@dataclass(frozen=True)
class Diagnostics:
    """One iteration's diagnostics (module docstring): each segment's report in shard order, and
    the squared spread and merged step (None where no merge was measured: the hopper)."""

    segments: tuple[SegmentReport, ...]
    spread2: float | None = None
    merged_step2: float | None = None

    @classmethod
    def from_steps(
        cls, segments: Sequence[SegmentReport], merged_step2: float | None
    ) -> Diagnostics:
        """From the segments' squared steps against one shared start, and the merge's:
        ``sum n_k step2_k / N - merged_step2`` (clamped at 0)."""
        if merged_step2 is None:
            return cls(tuple(segments))
        images = sum(s.images for s in segments)
        mean_step2 = math.fsum(s.images * s.step2 for s in segments) / images
        return cls(tuple(segments), max(0.0, mean_step2 - merged_step2), float(merged_step2))

    @classmethod
    def from_vectors(
        cls,
        segments: Sequence[SegmentReport],
        starts: Mapping[int, np.ndarray],
        models: Mapping[int, np.ndarray],
        average: np.ndarray,
    ) -> Diagnostics:
        """From each segment's start and trained weights (key -> vector) and their image-weighted
        ``average``: the spread around it, directly."""
        counts = {s.key: s.images for s in segments}
        images = sum(counts.values())
        keys = [s.key for s in segments]
        spread2 = (
            math.fsum(counts[k] * averaging.squared_distance(models[k], average) for k in keys)
            / images
        )
        first = starts[keys[0]]
        if all(starts[k] is first for k in keys):
            start = first
        else:
            start = averaging.weighted_average([starts[k] for k in keys], [counts[k] for k in keys])
        return cls(tuple(segments), spread2, averaging.squared_distance(average, start))

    @property
    def spread(self) -> float | None:
        return None if self.spread2 is None else math.sqrt(self.spread2)

    @property
    def merged_step(self) -> float | None:
        return None if self.merged_step2 is None else math.sqrt(self.merged_step2)

    @property
    def drift_ratio(self) -> float | None:
        """Spread / merged step: how far apart the segments went for each unit the merge moved."""
        if self.spread2 is None or not self.merged_step2:
            return None
        return math.sqrt(self.spread2) / math.sqrt(self.merged_step2)  # spread / merged_step

    def row(self) -> dict:
        """The history row's part: ``spread``, ``merged_step``, ``drift_ratio`` (where measured)
        and ``per_segment``, a list of {key, shard, images, <metrics>, seconds, step}."""
        per_segment = [
            {
                "key": s.key,
                "shard": s.shard,
                "images": s.images,
                **s.metrics,
                "seconds": s.seconds,
                "step": math.sqrt(s.step2),
            }
            for s in self.segments
        ]
        merged = {
            "spread": self.spread,
            "merged_step": self.merged_step,
            "drift_ratio": self.drift_ratio,
        }
        return {**{k: v for k, v in merged.items() if v is not None}, "per_segment": per_segment}


def flat_row(row: dict) -> dict:
    """A history row with numbers only: its ``per_segment`` list becomes ``<name>_segment_<key>``
    (``loss_segment_0``, ``step_segment_0``, ...), as Keras callbacks and CSV files take them."""
    flat = {k: v for k, v in row.items() if k != "per_segment"}
    for s in row.get("per_segment", ()):
        flat.update(
            {f"{k}_segment_{s['key']}": v for k, v in s.items() if k not in ("key", "shard")}
        )
    return flat


def cancellation_bound(merged_step2: float, average: np.ndarray) -> float:
    """How far ``from_steps``' spread^2 may depart from ``from_vectors``' around the float32
    average ``average`` (module docstring), before float64's own rounding."""
    rounding = FLOAT32_ROUNDING * float(np.linalg.norm(np.asarray(average, np.float64)))
    return 2.0 * math.sqrt(merged_step2) * rounding + 4.0 * rounding**2
