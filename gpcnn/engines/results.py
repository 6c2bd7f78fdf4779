"""An iteration's results as the client receives them: the rows of a result stream decoded into
a ``Trained`` (the database's merge, or each key's vector and metrics), vectors reassembled from
their chunks (``assemble``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpcnn.kernel import segment


def assemble(chunks: Mapping[int, bytes | memoryview], what: str = "a vector") -> np.ndarray:
    """The float32 vector of its chunks (chunk index -> bytes), which must be 0..n-1."""
    if sorted(chunks) != list(range(len(chunks))):
        raise ValueError(f"chunks {sorted(chunks)} of {what} came back, not 0..{len(chunks) - 1}")
    if not chunks:
        return np.zeros(0, dtype="<f4")
    return np.concatenate([np.frombuffer(chunks[i], dtype="<f4") for i in range(len(chunks))])


@dataclass
class Trained:
    """An iteration's result: merged metrics and vector, and/or each key's (metrics, vector)."""

    metrics: dict | None
    vector: np.ndarray | None
    per_key: dict[int, tuple[dict, np.ndarray]] | None


def merged_result(rows: list[tuple]) -> Trained:
    """(chunk, merged value) rows: chunk -1 the merged small state, then the averaged vector."""
    chunks = {int(chunk): value for chunk, value in rows}
    state = chunks.pop(-1)
    return Trained(segment.final_metrics(segment.decode_state(state)), assemble(chunks), None)


def per_key_result(rows: list[tuple], keys: Sequence[int]) -> Trained:
    """(key, chunk, count, data) rows: each key's metrics and vector, in the order of ``keys``
    (shard order: what the rules add up in)."""
    found: dict[int, tuple[dict, dict[int, memoryview]]] = {}
    for key, chunk, _, data in rows:
        state, chunks = found.setdefault(int(key), ({}, {}))
        if chunk < 0:
            state.update(segment.decode_state(data))
        else:
            chunks[int(chunk)] = data
    per_key = {
        key: (segment.final_metrics(found[key][0]), assemble(found[key][1], f"key {key}'s vector"))
        for key in sorted(found, key=list(keys).index)
    }
    return Trained(None, None, per_key)


