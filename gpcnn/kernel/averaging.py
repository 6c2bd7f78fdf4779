"""The streamed image-weighted average of flat weight vectors (numpy only): MADlib's merge.

Run inside the database (``accumulate`` per segment, adding in the aggregate's merge function,
``finish`` in its final function) and by the client's streaming average: the same code both sides.
Sums are float64 and counts exact integers (MADlib's float32 count is exact only to 2**24).
``squared_distance`` is the diagnostics' one measure of a step (``||a - b||^2``), on both sides too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Vector = np.ndarray
BLOCK_VALUES = 1 << 18  # averaged or compared at a time: the float64 temporaries stay small


def accumulate(weights: Vector, count: int) -> Vector:
    """One segment's contribution S = n * w, in float64 (exact counts, no float32 rounding)."""
    return np.asarray(weights, dtype=np.float64) * int(count)


def finish(weight_sum: npt.ArrayLike, count: int) -> Vector:
    """w = S / n as float32; an empty total is an error."""
    if int(count) <= 0:
        raise ValueError("cannot average models that saw no images")
    return (np.asarray(weight_sum, dtype=np.float64) / int(count)).astype(np.float32)


def weighted_average(models: Sequence[Vector], counts: Sequence[int]) -> Vector:
    """MADlib's merge: ``sum(n_k * w_k) / sum(n_k)``."""
    total = sum(accumulate(m, n) for m, n in zip(models, counts, strict=True))
    return finish(total, sum(int(n) for n in counts))


def squared_distance(a: Vector, b: Vector, total: float = 0.0) -> float:
    """``total + ||a - b||^2`` of two float32 vectors of one size, added in float64 block by
    block of ``BLOCK_VALUES`` (the float32 differences are exact in float64). The additions'
    order is fixed by the blocks: a vector measured chunk by chunk (``total`` carried on, each
    chunk cut into the same blocks) sums in the same order wherever it is measured. ``einsum``,
    not ``dot``: BLAS's threads made ``dot`` 10-20x slower on a busy 2-core host."""
    if a.size != b.size:
        raise ValueError(f"cannot compare vectors of {a.size} and {b.size} values")
    for start in range(0, a.size, BLOCK_VALUES):
        difference = a[start : start + BLOCK_VALUES].astype(np.float64)
        difference -= b[start : start + BLOCK_VALUES]
        total += float(np.einsum("i,i->", difference, difference))
    return total
