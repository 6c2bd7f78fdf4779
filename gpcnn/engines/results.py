"""An iteration's results as the client receives them: the rows of a result stream decoded into
a ``Trained`` (the database's merge, or each key's vector and metrics, with each segment's
``SegmentReport``), vectors reassembled from their chunks (``assemble``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpcnn.kernel import averaging, states
from gpcnn.kernel.states import segment_records


def assemble(chunks: Mapping[int, bytes | memoryview], what: str = "a vector") -> np.ndarray:
    """The float32 vector of its chunks (chunk index -> bytes), which must be 0..n-1."""
    if sorted(chunks) != list(range(len(chunks))):
        raise ValueError(f"chunks {sorted(chunks)} of {what} came back, not 0..{len(chunks) - 1}")
    if not chunks:
        return np.zeros(0, dtype="<f4")
    return np.concatenate([np.frombuffer(chunks[i], dtype="<f4") for i in range(len(chunks))])


@dataclass(frozen=True)
class SegmentReport:
    """What one segment's training told of itself: its key and shard, images, image-weighted
    loss and metrics, seconds in its transition, and ``step2``, the squared length of its step
    ``||w_k - w_start||^2`` over the weights (float64, measured on the segment)."""

    key: int
    shard: int
    images: int
    metrics: dict[str, float]
    seconds: float
    step2: float


def segment_reports(state: dict) -> list[SegmentReport]:
    """The segments' reports a decoded (merged) state carries, in shard order."""
    reports = [
        SegmentReport(
            key=int(r["key"]),
            shard=int(r["shard"]),
            images=int(r["count"]),
            metrics={name: value / r["count"] for name, value in r["sums"].items()},
            seconds=float(r["seconds"]),
            step2=float(r["step2"]),
        )
        for r in segment_records(state)
    ]
    return sorted(reports, key=lambda r: r.shard)


@dataclass
class Trained:
    """An iteration's result: merged metrics and vector, and/or each key's (metrics, vector);
    each segment's report; with a merge measured against a ``reference`` start, the merged
    step's squared length ``||w̄ - w_start||^2`` (float64, over the reference's values)."""

    metrics: dict | None
    vector: np.ndarray | None
    per_key: dict[int, tuple[dict, np.ndarray]] | None
    segments: list[SegmentReport] = field(default_factory=list)
    merged_step2: float | None = None


def merged_result(rows: list[tuple], reference: np.ndarray | None = None) -> Trained:
    """(chunk, merged value) rows: chunk -1 the merged small state, then the averaged vector;
    its step measured against ``reference`` when given."""
    chunks = {int(chunk): value for chunk, value in rows}
    state = states.decode_state(chunks.pop(-1))
    vector = assemble(chunks)
    step2 = None if reference is None else merged_step2(vector, reference, chunks)
    return Trained(states.final_metrics(state), vector, None, segment_reports(state), step2)


def merged_step2(vector: np.ndarray, reference: np.ndarray, chunks: Mapping) -> float:
    """``||vector - reference||^2`` over the reference's values, chunk by chunk in order (the
    client's streaming merge adds in this order too: the same float64 sum either way)."""
    total, offset = 0.0, 0
    for index in range(len(chunks)):
        stop = min(offset + np.frombuffer(chunks[index], dtype="<f4").size, reference.size)
        if stop <= offset:
            break
        total = averaging.squared_distance(vector[offset:stop], reference[offset:stop], total)
        offset = stop
    return total


def per_key_result(rows: list[tuple], keys: Sequence[int]) -> Trained:
    """(key, chunk, count, data) rows: each key's metrics and vector, in the order of ``keys``
    (shard order: what the rules add up in)."""
    found: dict[int, tuple[dict, dict[int, memoryview]]] = {}
    reports: list[SegmentReport] = []
    for key, chunk, _, data in rows:
        state, chunks = found.setdefault(int(key), ({}, {}))
        if chunk < 0:
            state.update(states.decode_state(data))
            reports += segment_reports(state)
        else:
            chunks[int(chunk)] = data
    per_key = {
        key: (states.final_metrics(found[key][0]), assemble(found[key][1], f"key {key}'s vector"))
        for key in sorted(found, key=list(keys).index)
    }
    return Trained(None, None, per_key, sorted(reports, key=lambda r: r.shard))
