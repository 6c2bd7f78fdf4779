"""The client's image-weighted average of K vectors (MADlib's merge), in the bits of the
database's: ``kernel.averaging``'s products and float64 sums, added in the same order, block by
block into the caller's vector through reused scratch memory. A numpy expression per block made
six temporaries of its size, each in fresh memory (0.36 s for two 25M-value vectors, against 0.05
s this way): the client averages every iteration's K trained vectors while they arrive."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BLOCK_VALUES = 1 << 18  # values averaged at a time: 2 MB of float64 scratch per block


class Averager:
    """``sum(n_k * w_k) / sum(n_k)`` written into a float32 vector through two float64 scratch
    blocks of its own. The bits of ``averaging.finish(0 + accumulate(w_0, n_0) + ...)``: the same
    products, summed in the same order, one division, one rounding to float32; the final
    ``+ 0.0`` gives a zero the sign that a sum starting from 0 gives it. One per thread."""

    def __init__(self, block_values: int = BLOCK_VALUES) -> None:
        self._sums = np.empty(block_values, dtype=np.float64)
        self._part = np.empty(block_values, dtype=np.float64)

    def average(self, models: Sequence[np.ndarray], counts: Sequence[int], out: np.ndarray):
        """The image-weighted average of ``models`` (flat, of ``out``'s size) into ``out``
        (float32), which is returned."""
        counts = [int(n) for n in counts]
        if len(models) != len(counts):
            raise ValueError(f"{len(models)} models for {len(counts)} image counts")
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


def weighted_average(models: Sequence[np.ndarray], counts: Sequence[int]) -> np.ndarray:
    """MADlib's merge ``sum(n_k * w_k) / sum(n_k)`` of flat vectors, as a new float32 vector."""
    if not models:
        raise ValueError("cannot average models that saw no images")
    flat = [np.asarray(m).reshape(-1) for m in models]
    size = flat[0].size
    averager = Averager(min(BLOCK_VALUES, max(size, 1)))
    return averager.average(flat, counts, np.empty(size, dtype=np.float32))
