"""The streamed image-weighted average of flat weight vectors (numpy only): MADlib's merge.

Run inside the database (``accumulate`` per segment, adding in the aggregate's merge function,
``finish`` in its final function) and by the client's streaming average: the same code both sides.
Sums are float64 and counts exact integers (MADlib's float32 count is exact only to 2**24).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Vector = np.ndarray


def accumulate(weights: Vector, count: int) -> Vector:
    """One segment's contribution S = n * w, in float64 (exact counts, no float32 rounding)."""
    return np.asarray(weights, dtype=np.float64) * int(count)


def finish(weight_sum: Vector, count: int) -> Vector:
    """w = S / n as float32; an empty total is an error."""
    if int(count) <= 0:
        raise ValueError("cannot average models that saw no images")
    return (np.asarray(weight_sum, dtype=np.float64) / int(count)).astype(np.float32)


def weighted_average(models: Sequence[Vector], counts: Sequence[int]) -> Vector:
    """MADlib's merge: ``sum(n_k * w_k) / sum(n_k)``."""
    total = sum(accumulate(m, n) for m, n in zip(models, counts, strict=True))
    return finish(total, sum(int(n) for n in counts))
