"""What the robust rules share: every weight's values across the segments, a slice of the
weights at a time (a K × slice block, so the memory beside the K vectors stays bounded)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from gpcnn.kernel.averaging import Vector

SLICE = 1 << 20  # weights per block: K × 4 MiB of values, K × 8 MiB of sort order at most


def coordinatewise(
    segments: Mapping[int, Vector],
    counts: Mapping[int, int],
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> Vector:
    """``statistic(values, weights)`` of every weight over the segments (``values``: K × n, one
    row per segment in key order; ``weights``: each segment's images), as one float32 vector."""
    keys = sorted(segments)
    weights = np.array([int(counts[k]) for k in keys], np.float64)
    size = len(segments[keys[0]])
    merged = np.empty(size, np.float32)
    for begin in range(0, size, SLICE):
        end = min(begin + SLICE, size)
        values = np.stack([np.asarray(segments[k][begin:end], np.float64) for k in keys])
        merged[begin:end] = statistic(values, weights)
    return merged
