"""The named layout of a start or trained vector: its parts in order, each with its size.

A segment's start vector is the weights, then the optimizer state when one is sent, then the
extras that its local steps read (SCAFFOLD's correction c - c_i); its trained vector is the
weights, then the optimizer state unless the policy resets it, then the extras its local steps
return (SCAFFOLD's control c_i+). The client and the segments cut and join them with the same
``Layout`` (``model_layout``), so no side slices by position.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

WEIGHTS = "weights"
OPTIMIZER = "optimizer"


@dataclass(frozen=True)
class Layout:
    """Parts (name, size) in order; at most one size is None: that part (the optimizer state,
    whose size only the model knows) takes whatever the others leave, possibly nothing."""

    parts: tuple[tuple[str, int | None], ...]

    def sizes(self, total: int) -> dict[str, int]:
        """Each part's size in a vector of ``total`` values."""
        fixed = sum(size for _, size in self.parts if size is not None)
        if total < fixed:
            raise ValueError(f"a vector of {total} values cannot hold {self.names()} ({fixed})")
        return {name: total - fixed if size is None else size for name, size in self.parts}

    def names(self) -> list[str]:
        return [name for name, _ in self.parts]

    def split(self, vector: np.ndarray) -> dict[str, np.ndarray]:
        """The parts of ``vector`` by name, as views (no copy)."""
        out, offset = {}, 0
        for name, size in self.sizes(vector.size).items():
            out[name] = vector[offset : offset + size]
            offset += size
        return out

    def join(self, values: Mapping[str, np.ndarray | None]) -> np.ndarray:
        """The parts given (a None or missing part is empty) as one float32 vector, in order;
        the vector itself when it is the only part given, without a copy."""
        given = [value for name in self.names() if (value := values.get(name)) is not None]
        if len(given) == 1:
            return np.asarray(given[0], dtype=np.float32)
        return np.asarray(np.concatenate(given), dtype=np.float32)


def model_layout(weights: int, extras: Iterable[str] = ()) -> Layout:
    """A start or trained vector's: the weights (``weights`` values), the optimizer state (when
    sent, or kept), then the model-sized ``extras`` in their order: those the local steps read
    from a start, or give back in a trained vector (``local_steps``' ``sends``, ``returns``)."""
    return Layout(((WEIGHTS, weights), (OPTIMIZER, None), *((name, weights) for name in extras)))


MOVING_MEAN = "moving_mean"
MOVING_VARIANCE = "moving_variance"


def moving_statistics(entries: Iterable[Mapping]) -> tuple[np.ndarray, np.ndarray]:
    """The flat positions, in the weights, of every BatchNormalization layer's moving mean and,
    at the same index, of its moving variance: from a manifest (``wire.manifest``: one entry per
    weight, named by its path), where Keras names a BatchNormalization layer's statistics
    ``<layer>/moving_mean`` and ``<layer>/moving_variance``. Empty for a model without them."""
    offsets: dict[str, dict[str, tuple[int, int]]] = {}
    offset = 0
    for entry in entries:
        size = int(np.prod(entry["shape"], dtype=np.int64))
        layer, _, name = str(entry["name"]).rpartition("/")
        if name in (MOVING_MEAN, MOVING_VARIANCE):
            offsets.setdefault(layer, {})[name] = (offset, size)
        offset += size
    means, variances = [], []
    for layer, pair in offsets.items():
        if (
            set(pair) != {MOVING_MEAN, MOVING_VARIANCE}
            or pair[MOVING_MEAN][1] != pair[MOVING_VARIANCE][1]
        ):
            raise ValueError(
                f"layer {layer!r}: a moving mean and a moving variance of one size expected, "
                f"found {sorted(pair)} of sizes {[size for _, size in pair.values()]}"
            )
        (mean, size), (variance, _) = pair[MOVING_MEAN], pair[MOVING_VARIANCE]
        means.append(np.arange(mean, mean + size))
        variances.append(np.arange(variance, variance + size))
    empty = np.zeros(0, np.int64)
    return (
        np.concatenate(means) if means else empty,
        np.concatenate(variances) if variances else empty,
    )
