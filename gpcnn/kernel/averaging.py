"""The streamed image-weighted average of flat weight vectors (numpy only): MADlib's merge.

Run inside the database (``accumulate`` per segment, adding in the aggregate's merge function,
``finish`` in its final function) and by the client (``Averager``: its streaming average and the
per-segment rules' average): the same arithmetic both sides. Sums are float64 and counts exact
integers (MADlib's float32 count is exact only to 2**24).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Vector = np.ndarray

BLOCK_VALUES = 1 << 18  # values averaged at a time: the float64 scratch stays at 2 MB a vector


def accumulate(weights: Vector, count: int) -> Vector:
    """One segment's contribution S = n * w, in float64 (exact counts, no float32 rounding)."""
    return np.asarray(weights, dtype=np.float64) * int(count)


def finish(weight_sum: Vector, count: int) -> Vector:
    """w = S / n as float32; an empty total is an error."""
    if int(count) <= 0:
        raise ValueError("cannot average models that saw no images")
    return (np.asarray(weight_sum, dtype=np.float64) / int(count)).astype(np.float32)


class Averager:
    """``sum(n_k * w_k) / sum(n_k)`` written into a float32 vector, block by block through two
    float64 scratch blocks of its own, reused: no temporary the size of the vectors, no fresh
    memory per call. The bits of ``finish(0 + accumulate(w_0, n_0) + ...)``: the same products,
    sums in the same order, one division and one rounding to float32 (the final ``+ 0.0`` gives
    a zero the sign a sum that starts from 0 gives it). Not for concurrent use: one per thread."""

    def __init__(self, block_values: int = BLOCK_VALUES) -> None:
        self._sums = np.empty(block_values, dtype=np.float64)
        self._part = np.empty(block_values, dtype=np.float64)

    def average(self, models: Sequence[Vector], counts: Sequence[int], out: Vector) -> Vector:
        """The image-weighted average of ``models`` (equal sizes) into ``out`` (float32)."""
        counts = [int(n) for n in counts]
        if len(models) != len(counts):
            raise ValueError(f"{len(models)} models for {len(counts)} counts")
        if any(np.size(model) != out.size for model in models):
            sizes = sorted({int(np.size(model)) for model in models})
            raise ValueError(f"models of {sizes} values for an average of {out.size}")
        total = sum(counts)
        if total <= 0:
            raise ValueError("cannot average models that saw no images")
        step = self._sums.size
        for start in range(0, out.size, step):
            stop = min(start + step, out.size)
            sums, part = self._sums[: stop - start], self._part[: stop - start]
            np.multiply(models[0][start:stop], counts[0], out=sums, dtype=np.float64)
            for model, count in zip(models[1:], counts[1:], strict=True):
                np.multiply(model[start:stop], count, out=part, dtype=np.float64)
                np.add(sums, part, out=sums)
            np.divide(sums, total, out=sums)
            block = out[start:stop]
            np.copyto(block, sums, casting="same_kind")
            np.add(block, np.float32(0.0), out=block)
        return out


def weighted_average(models: Sequence[Vector], counts: Sequence[int]) -> Vector:
    """MADlib's merge: ``sum(n_k * w_k) / sum(n_k)``, a new float32 vector."""
    if not models:
        raise ValueError("cannot average models that saw no images")
    size = np.asarray(models[0]).size
    models = [np.asarray(m).reshape(-1) for m in models]
    return Averager(min(BLOCK_VALUES, max(size, 1))).average(
        models, counts, np.empty(size, dtype=np.float32)
    )
