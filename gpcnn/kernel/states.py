"""The aggregates' small states and this process's vectors: a state's encoding (a JSON header),
the start vector assembled from its chunks (the inbox), the trained vector waiting for
``state_chunks`` (the outbox), and the image-weighted loss and metrics of merged states.

An aggregate state is small: a JSON header (image count, loss/metric sums, how much of the start
vector arrived, a token naming this statement's vectors in this process). Vectors never live in a
state: the start arrives as chunk rows before the images, is assembled in the inbox and loaded;
the trained vector waits in the outbox until ``state_chunks``, later in the same statement and
the same process, hands it on as chunk rows. So no value is ever bigger than a chunk, and nothing
outlives the statement: a stale token is an error, never a silent reuse.
"""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, overload

import numpy as np

from . import wire
from .protocol import SegmentOptions, Transport
from .segment_errors import SegmentError

if TYPE_CHECKING:  # for the annotation only: local_steps loads Keras
    from .local_steps import LocalSteps

STATE_MAGIC = b"GPCS"
RESULT_MAGIC = b"GPCR"

_inbox: dict[str, np.ndarray] = {}
outbox: dict[str, np.ndarray] = {}  # a trained vector per token, for ``state_chunks``
# A segment's ``local_steps.LocalSteps`` per token, from its first buffer to its last.
hooks: dict[str, LocalSteps] = {}
# A segment's start weights per token, until its last buffer measures its step against them.
begun: dict[str, np.ndarray] = {}


def pack(magic: bytes, header: dict, payload: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return magic + struct.pack("<I", len(head)) + head + payload


def unpack(data: bytes | memoryview, magic: bytes) -> tuple[dict, memoryview]:
    view = memoryview(data)
    if bytes(view[:4]) != magic:
        raise SegmentError("not a gpcnn aggregate state (wrong magic)")
    (length,) = struct.unpack("<I", view[4:8])
    return json.loads(bytes(view[8 : 8 + length])), view[8 + length :]


def encode_state(header: dict) -> bytes:
    return pack(STATE_MAGIC, header)


def decode_state(data: bytes | memoryview) -> dict:
    header, _ = unpack(data, STATE_MAGIC)
    return header


def new_state(token: str) -> dict:
    return {"count": 0, "sums": {}, "token": token, "received": 0, "chunks": 0, "started": False}


def statement_transport(options: SegmentOptions) -> Transport:
    """The transport that the options of every statement moving vectors carry."""
    if options.transport is None:
        raise SegmentError("the segment options name no transport for the statement's vectors")
    return options.transport


def receive(state: dict, chunk: int, data: bytes, options: SegmentOptions) -> None:
    """Copy one chunk of the start vector into this statement's buffer, in chunk order."""
    token, size = state["token"], statement_transport(options).vector_size
    if chunk != state["chunks"]:
        raise SegmentError(f"start chunk {chunk} arrived, chunk {state['chunks']} was expected")
    if state["chunks"] == 0:
        _forget_other_statements(token)
        _inbox[token] = np.empty(size, dtype=wire.WIRE_DTYPE)
    values = wire.from_bytes(data)
    if state["received"] + values.size > size:
        raise SegmentError(f"the start vector has more than its {size} values")
    _inbox[token][state["received"] : state["received"] + values.size] = values
    state["received"] += int(values.size)
    state["chunks"] += 1


def _forget_other_statements(token: str) -> None:
    """Drop what a failed or cancelled earlier statement left in this process."""
    _inbox.clear()
    statement = token.split("/")[0] + "/"
    for box in (outbox, hooks, begun):
        for stale in [t for t in box if not t.startswith(statement)]:
            del box[stale]


def take_start(state: dict, options: SegmentOptions, key: int) -> np.ndarray:
    size = statement_transport(options).vector_size
    if state["received"] != size or state["token"] not in _inbox:
        raise SegmentError(
            f"segment {key} received {state['received']} of the {size} start values before its "
            "first buffer"
        )
    state["started"] = True
    return _inbox.pop(state["token"])


def state_chunks(state: bytes | None, chunk_values: int):
    """Rows (chunk, images, data) of one finished state: chunk -1 is the state itself (with the
    vector's size, ``values``), then the trained vector (float32) in chunks of ``chunk_values``,
    taken from this process's outbox."""
    if state is None:
        return
    header = decode_state(state)
    token = header.get("token")
    vector = None if token is None else outbox.pop(token, None)
    if vector is None:
        raise SegmentError(
            f"the trained vector {token} is not in this process: the query plan "
            "moved the aggregate's result away from the segment that computed it"
        )
    count = header["count"]
    yield -1, count, encode_state({**header, "values": int(vector.size)})
    for index, start in enumerate(range(0, vector.size, int(chunk_values))):
        yield index, count, vector[start : start + int(chunk_values)].tobytes()


def final_metrics(state: dict) -> dict:
    """Image-weighted loss and metrics of a (merged) state; an empty total is an error."""
    if state["count"] == 0:
        raise SegmentError("no images reached the aggregate: the table or slice is empty")
    return {"images": state["count"], **{k: v / state["count"] for k, v in state["sums"].items()}}


def decode_result(data: bytes | memoryview) -> dict:
    """A final value of the ``merge`` aggregate: ``{"images", "loss", metrics...}``."""
    header, _ = unpack(data, RESULT_MAGIC)
    return header


def finished(header: dict, key: int, shard: int, step2: float) -> None:
    """Mark a segment's state as its training's last: its key and shard, and ``step2``, the
    squared length of its step ``||w_k - w_start||^2`` (the weights' float64 sum), which the
    client's diagnostics read (``segment_records``)."""
    header.update(key=int(key), shard=int(shard), step2=float(step2))


def segment_records(state: dict) -> list[dict]:
    """The finished segments' records a (merged) state carries: key, shard, images, loss/metric
    sums, seconds in the transition and ``step2``, one per segment; none for evaluation."""
    if "segments" in state:
        return list(state["segments"])
    if "step2" not in state:
        return []
    names = ("key", "shard", "count", "sums", "seconds", "step2")
    return [{name: state[name] for name in names}]


# ``a`` may be a chunk state's payload, a view (``merging``); given ``b``, the sum is bytes.
@overload
def add_states(a: bytes | memoryview | None, b: bytes) -> bytes: ...
@overload
def add_states(a: bytes | None, b: bytes | None) -> bytes | None: ...
def add_states(a: bytes | memoryview | None, b: bytes | None) -> bytes | memoryview | None:
    """Two small states added: image counts and loss/metric sums (vectors merge by chunk), and
    the finished segments' records side by side."""
    if a is None:
        return b
    if b is None:
        return a
    state_a, state_b = decode_state(a), decode_state(b)
    sums_a, sums_b = state_a["sums"], state_b["sums"]
    sums = {k: sums_a.get(k, 0.0) + sums_b.get(k, 0.0) for k in sums_a.keys() | sums_b.keys()}
    merged = {"count": state_a["count"] + state_b["count"], "sums": sums}
    records = segment_records(state_a) + segment_records(state_b)
    if records:
        merged["segments"] = records
    return encode_state(merged)


def state_result(state: bytes | None) -> bytes:
    """The image-weighted loss and metrics of a merged state."""
    if state is None:
        raise SegmentError("no images reached the aggregate: the table or slice is empty")
    return pack(RESULT_MAGIC, final_metrics(decode_state(state)))
