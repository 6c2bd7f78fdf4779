"""Which buffers each iteration trains: each key's buffers cut into consecutive slices, and the
schedule of merges per epoch (``Slice``, ``Schedule``, ``plan_slices``)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from gpcnn.data.tables import ImageTable, buffer_counts
from gpcnn.engines import Database


@dataclass(frozen=True)
class Slice:
    """The buffers of every key that one iteration trains on (× local epochs)."""

    first: list[int]
    stop: list[int]
    expected: list[int]
    sizes: list[list[int]]  # each key's buffers' image counts (one pass)

    def batches(self, batch_size: int, epochs: int) -> list[int]:
        """Mini-batches each key trains in this slice (a buffer's last batch may be short)."""
        return [epochs * sum(math.ceil(n / batch_size) for n in key) for key in self.sizes]


@dataclass(frozen=True)
class Schedule:
    """Which slice each iteration trains and the epoch it has reached after it: ``counts[e]``
    merges in epoch e + 1, the last count repeating (post-local SGD, Lin et al. 2020:
    ``[8, 8, 1]`` merges 8 times per epoch for 2 epochs, then once per epoch)."""

    counts: tuple[int, ...]
    cuts: dict[int, list[Slice]]  # the slices of each count
    epochs: int  # local epochs per iteration

    def at(self, iteration: int) -> tuple[Slice, float]:
        i, epoch = iteration - 1, 0
        for m in self.counts[:-1]:
            if i < m:
                return self.cuts[m][i], (epoch + (i + 1) / m) * self.epochs
            i, epoch = i - m, epoch + 1
        m = self.counts[-1]
        return self.cuts[m][i % m], (epoch + (i + 1) / m) * self.epochs

    def __iter__(self) -> Iterator[Slice]:
        return (part for cut in self.cuts.values() for part in cut)


def plan_slices(
    db: Database, info: ImageTable, merges_per_epoch: int | Sequence[int], epochs: int
) -> Schedule:
    """Cut each key's buffers, in order, into ``merges_per_epoch`` consecutive groups (a list:
    the count of each epoch, the last repeating)."""
    counts = (
        (int(merges_per_epoch),)
        if isinstance(merges_per_epoch, int | np.integer)
        else tuple(int(m) for m in merges_per_epoch)
    )
    buffers = buffer_counts(db, info)
    fewest = min(len(b) for b in buffers.values())
    if fewest < max(counts):
        raise ValueError(
            f"merges_per_epoch={max(counts)}, but a segment of {info.table} has only {fewest} "
            "buffers: reload the table with a smaller buffer_size"
        )
    return Schedule(counts, {m: _cut(info, buffers, m, epochs) for m in counts}, epochs)


def _cut(info: ImageTable, buffers: dict, merges: int, epochs: int) -> list[Slice]:
    groups = {k: np.array_split(np.arange(len(b)), merges) for k, b in buffers.items()}
    slices = []
    for j in range(merges):
        first, stop, expected, sizes = [], [], [], []
        for key in info.keys:
            part = [buffers[key][i] for i in groups[key][j]]
            first.append(part[0][0])
            stop.append(part[-1][0] + 1)
            expected.append(sum(n for _, n in part) * epochs)
            sizes.append([n for _, n in part])
        slices.append(Slice(first, stop, expected, sizes))
    return slices
