"""The streamed image-weighted average of flat weight vectors (numpy only): MADlib's merge.

Run inside the database: ``accumulate`` per segment, adding in the aggregate's merge function,
``finish`` in its final function. Sums are float64 and counts exact integers (MADlib's float32
count is exact only to 2**24). The client's average (``gpcnn.engines.averager``) gives the same
bits.
"""

from __future__ import annotations

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
