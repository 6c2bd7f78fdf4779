"""BatchNorm moving statistics pooled over the segments: the merged moving variance is the
variance of the union, sum p_k (var_k + mu_k^2) - mubar^2 (p_k = n_k / N), where the plain
average keeps only sum p_k var_k and drops the spread between the segments' means."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpcnn.kernel.averaging import Vector


def pooled(
    average: Vector,
    segments: Mapping[int, Vector] | None,
    counts: Mapping[int, int],
    means: np.ndarray,
    variances: np.ndarray,
) -> Vector:
    """``average`` (the image-weighted average of the ``segments``' weights) with the values at
    ``variances`` replaced by the union's variance: the average variance plus the image-weighted
    spread of the segments' means (at ``means``, index by index) around their average, summed
    as sum n_k (mu_k - mubar)^2 / N in float64 so that it is never negative. A new vector."""
    if segments is None:
        raise ValueError("pooled BatchNorm statistics need each segment's model, not the average")
    keys = sorted(segments)
    n = np.array([int(counts[k]) for k in keys], np.float64)
    total = n.sum()
    mu = np.stack([np.asarray(segments[k], np.float64)[means] for k in keys])
    var = np.stack([np.asarray(segments[k], np.float64)[variances] for k in keys])
    mean = n @ mu / total
    out = np.array(average, np.float32)
    out[variances] = ((n @ var + n @ (mu - mean) ** 2) / total).astype(np.float32)
    return out
