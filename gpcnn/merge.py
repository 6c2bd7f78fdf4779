"""Merge rules on flat weight vectors (numpy only): the same code in the database and locally.

A merge rule turns the K segment models of one iteration into the next model. MADlib's rule, the
default, is the image-count-weighted average of ALL weights (trainable and not: BatchNorm moving
statistics are weights too). It needs weights only, never gradients.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def weighted_average(models: Sequence[np.ndarray], counts: Sequence[int]) -> np.ndarray:
    """MADlib's merge: ``sum(n_k * w_k) / sum(n_k)``, accumulated in float64, returned as float32."""
    total = int(sum(int(n) for n in counts))
    if total <= 0:
        raise ValueError("cannot average models that saw no images")
    acc = np.zeros(np.asarray(models[0]).shape, dtype=np.float64)
    for model, n in zip(models, counts, strict=True):
        acc += np.asarray(model, dtype=np.float64) * int(n)
    return (acc / total).astype(np.float32)
