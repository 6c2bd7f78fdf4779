"""Merging the K trained vectors chunk by chunk, in the database (``GROUP BY chunk``): the state
of one chunk is its image-weighted float64 sum and the exact integer image count, never more than
twice a chunk. Chunk -1 carries the segments' small states (counts and metric sums) instead."""

from __future__ import annotations

import numpy as np

from . import averaging, wire
from .states import add_states, pack, unpack

CHUNK_MAGIC = b"GPCC"


def merge_chunk_transition(state: bytes | None, chunk: int, count: int, data: bytes) -> bytes:
    """Add one segment's chunk: S += n * w (float64), n exact; chunk -1 adds the small states."""
    if chunk < 0:
        previous = None if state is None else unpack(state, CHUNK_MAGIC)[1]
        return pack(CHUNK_MAGIC, {"chunk": -1}, add_states(previous, data))
    contribution = averaging.accumulate(wire.from_bytes(data), count)
    if state is None:
        return pack(CHUNK_MAGIC, {"chunk": int(chunk), "count": int(count)}, contribution.tobytes())
    header, payload = unpack(state, CHUNK_MAGIC)
    total = np.frombuffer(payload, dtype="<f8") + contribution
    return pack(CHUNK_MAGIC, {**header, "count": header["count"] + int(count)}, total.tobytes())


def merge_chunk_final(state: bytes | None) -> bytes | None:
    """A chunk of the merged vector (float32 S / n), or the merged small state for chunk -1."""
    if state is None:
        return None
    header, payload = unpack(state, CHUNK_MAGIC)
    if header["chunk"] < 0:
        return bytes(payload)
    return wire.to_bytes(averaging.finish(np.frombuffer(payload, dtype="<f8"), header["count"]))
