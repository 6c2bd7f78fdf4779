"""Label skew where the data lives: one aggregate statement counts an image table's labels per
segment (key) and class on the server, and the skew index sums those counts up.

The index of a segment is the total-variation distance of its label mix from the table's,
``½ Σ_c |n_kc / n_k − N_c / N|``: 0 when the segment holds the table's mix, 1 − n_k / N when it
shares no class with the other segments (0.75 for one of four equal segments). A table has two
numbers: the largest over its segments and their mean weighted by images. Nothing but the K × C
counts reaches the client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import sqlalchemy as sa

from gpcnn.engines.compiler import text_safe
from gpcnn.engines.packing_sql import SETTINGS, little_endian_sql


class SkewIndex(NamedTuple):
    """A table's label skew: the largest segment's index and the image-weighted mean."""

    max: float
    mean: float


def label_counts_sql(table_sql: str, classes: int) -> str:
    """(key, label, images) of an image table, from its buffers' little-endian int32 labels
    (those bytes of each that labels below ``classes`` use).

    The labels are copied once per buffer (``y || ''``) so that the byte reads that follow see
    a plain value, not a TOAST pointer fetched again for every byte, and decoded in a fenced
    subquery, so that a sorting plan sorts plain numbers. One text on every engine; on Greenplum
    the counting runs on the segments."""
    label = little_endian_sql("b.y", "g.i", 4, top=classes)
    return (
        f"SELECT u.key, u.label, count(*) AS images FROM (SELECT b.key, {label} AS label "
        f"FROM (SELECT __dist_key__ AS key, n, y || ''::bytea AS y FROM {text_safe(table_sql)} "
        "OFFSET 0) b CROSS JOIN LATERAL generate_series(0, b.n - 1) AS g(i) OFFSET 0) u "
        "GROUP BY 1, 2"
    )


def label_counts(
    conn: sa.Connection, table_sql: str, keys: Sequence[int], classes: int
) -> list[list[int]]:
    """Each key's images per class (in the order of ``keys``), counted on the server."""
    counts = {key: [0] * classes for key in keys}
    conn.execute(sa.text(SETTINGS))  # no JIT: LLVM beside TensorFlow crashes a backend
    for key, label, images in conn.execute(sa.text(label_counts_sql(table_sql, classes))):
        counts[int(key)][int(label)] = int(images)
    return [counts[key] for key in keys]


def segment_distances(counts: Sequence[Sequence[int]]) -> list[float]:
    """Each segment's total-variation distance from the table's label mix."""
    sizes = [sum(row) for row in counts]
    total = sum(sizes)
    mix = [sum(column) / total for column in zip(*counts, strict=True)]
    return [
        0.5 * sum(abs(c / n - m) for c, m in zip(row, mix, strict=True)) if n else 0.0
        for row, n in zip(counts, sizes, strict=True)
    ]


def skew_index(counts: Sequence[Sequence[int]]) -> SkewIndex:
    """The segments' distances (``segment_distances``): the largest, and their mean weighted by
    the segments' images."""
    sizes = [sum(row) for row in counts]
    distances = segment_distances(counts)
    mean = sum(n * d for n, d in zip(sizes, distances, strict=True)) / sum(sizes)
    return SkewIndex(max(distances), mean)
