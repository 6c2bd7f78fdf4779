"""The code that runs inside the database, one segment at a time.

Plain Python: the installer copies this module (with the rest of ``gpcnn.kernel``) into the bodies of
the ``plpython3u`` functions, and tests import it directly. The options of every call arrive as the
JSON of ``protocol.SegmentOptions``. Everything arrives as arguments: nothing here
reads tables (on Greenplum a UDF may not query during a distributed query).

The training aggregate, MADlib-style (docs/design.md, The aggregate protocol), with every vector in chunks:
- ``train_transition`` runs once per row. The segment's first buffer comes once per chunk of its
  start vector (joined from ``transfers``): the chunks are assembled in this process, then the
  cached model takes the weights, the optimizer is reset (or set) and the random state fixed, and
  every buffer is trained with a ``train_on_batch`` loop, accumulating image-weighted loss and
  metrics. Every random stream derives from the shard's position (``SegmentOptions.shard``), never
  from the key, which the engine chose. On the last buffer (the image count reaches ``expected``)
  the trained vector goes to this process's outbox; the state itself only ever holds counts, sums
  and a token.
- ``state_chunks`` (later in the same statement, same process) hands the vector on as chunk rows.
- ``merge_chunk_transition`` / ``merge_chunk_final`` merge one chunk of the K vectors: float64
  sums of ``n * w``, exact integer counts, then ``S / n`` (``averaging.accumulate`` / ``finish``).
- ``add_states`` / ``state_result`` add small states and give the image-weighted loss and metrics.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
import sys
import traceback
from collections import OrderedDict
from typing import Any

import numpy as np

from . import averaging, wire
from .keras_setup import compiled, keras_module, rebuilt
from .protocol import SegmentOptions

STATE_MAGIC = b"GPCS"
RESULT_MAGIC = b"GPCR"
LABEL_DTYPE = np.dtype("<i4")
_MODEL_CACHE_SIZE = 4
EVALUATION_BATCH = 1000  # images per test_on_batch call: only speed depends on it

_models: OrderedDict[str, Any] = OrderedDict()


class SegmentError(RuntimeError):
    """Raised inside the database; the message reaches the client in the SQL error."""


# -- images -------------------------------------------------------------------------------------


def to_model_input(images: np.ndarray) -> np.ndarray:
    """The one conversion of stored uint8 images to model input: ``float32(x) / 255``."""
    return np.asarray(images, dtype=np.float32) / np.float32(255.0)


def decode_images(data: bytes | memoryview, n: int, image_shape: list[int]) -> np.ndarray:
    """The uint8 images of one buffer, shaped (n, H, W, C)."""
    return np.frombuffer(data, dtype=np.uint8).reshape((n, *image_shape))


def decode_labels(data: bytes | memoryview) -> np.ndarray:
    return np.frombuffer(data, dtype=LABEL_DTYPE)


# A SQL array's in-memory form (PostgreSQL's ArrayType less its length word), as ``array_bytes``
# gives it: ndim, the offset of the data (0: no NULL elements), the element type's oid, the
# dimensions and lower bounds, padding to 8 bytes, then the numbers in the server's byte order.
ARRAY_DTYPES = {
    21: np.dtype("=i2"),
    23: np.dtype("=i4"),
    700: np.dtype("=f4"),
    701: np.dtype("=f8"),
}


def _records(data: bytes, n: int) -> np.ndarray:
    """``n`` records of one size, as an (n, size) array of bytes."""
    if n < 1 or len(data) % n:
        raise SegmentError(
            f"{len(data)} bytes are not {n} images of one size: give every row one array shape"
        )
    return np.frombuffer(data, dtype=np.uint8).reshape(n, -1)


def _leading(records: np.ndarray) -> np.ndarray:
    """The ``int8send`` number that leads each record (a rank or an id): one aggregate carries
    a row's values together, whatever order it met the rows in."""
    return records[:, :8].copy().view(">i8")[:, 0]


def _in_rank_order(data: bytes, n: int) -> np.ndarray:
    """Records ``int8send(rank) || payload`` as the payloads in rank order: the aggregate that
    concatenated them need not sort its rows."""
    records = _records(data, n)
    return records[np.argsort(_leading(records)), 8:]


def array_values(records: np.ndarray, length: int) -> np.ndarray:
    """Records that are each one array of ``length`` numbers (``array_bytes``) as an
    (n, length) array of the numbers: PL/Python would convert each to a Python object."""
    ndim, _, element_type = records[0, :12].view("=i4").tolist()
    dtype = ARRAY_DTYPES[element_type]
    start = (16 + 8 * ndim + 7) // 8 * 8 - 4
    headers = records[:, : 4 * (3 + ndim)].view("=i4")
    if (
        records.shape[1] != start + length * dtype.itemsize
        or (headers != [ndim, 0, element_type, *headers[0, 3:]]).any()
    ):
        raise SegmentError("the image arrays differ in shape or hold NULLs: give every row one")
    return records[:, start:].view(dtype)


def _in_range(values: np.ndarray, top: float) -> np.ndarray:
    """Per image: every number in [0, top] (NaN is not: it makes the minimum NaN)."""
    return (values.min(axis=1) >= 0) & (values.max(axis=1) <= top)


def first_out_of_range(data: bytes, n: int, length: int, top: float) -> int | None:
    """The smallest id of ``n`` records ``int8send(id) || array_bytes`` whose image has a number
    outside [0, top]."""
    records = _records(data, n)
    bad = ~_in_range(array_values(records[:, 8:], length), top)
    return int(_leading(records)[bad].min()) if bad.any() else None


def pixel_bytes(data: bytes, n: int, length: int, normalized: bool) -> bytes:
    """``n`` images (records of a rank and ``array_bytes``; 0..255, or 0..1 when
    ``normalized``) as stored uint8 bytes in rank order, rounded to the nearest level
    (``pack_table``, which names the row of a refusal)."""
    values = array_values(_in_rank_order(data, n), length)
    top = 1.0 if normalized else 255.0
    if not _in_range(values, top).all():
        raise SegmentError(f"an image has values outside 0..{top:g}")
    if values.dtype.kind == "i" and not normalized:
        return values.astype(np.uint8).tobytes()  # what rounding would give
    pixels = values.astype(np.float64)
    if normalized:
        pixels *= 255.0
    return np.rint(pixels).astype(np.uint8).tobytes()


def image_bytes(data: bytes, n: int) -> bytes:
    """``n`` uint8 images (records of a rank and the image) in rank order."""
    return _in_rank_order(data, n).tobytes()


def little_endian(data: bytes, n: int, width: int) -> bytes:
    """``n`` integers (records of a rank and ``int8send``) in rank order as little-endian
    bytes of ``width`` (4: labels, 8: ids), in the stored layout."""
    return _in_rank_order(data, n).view(">i8").astype(f"<i{int(width)}").tobytes()


# -- TensorFlow in this process ---------------------------------------------------------------


def probe(threads: int | None = None) -> str:
    """Versions and resources of the Python that runs here, as JSON (the environment check)."""
    keras = keras_module(threads)
    import tensorflow as tf

    return json.dumps(
        {
            "python": sys.version.split()[0],
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "numpy": np.__version__,
            "cpu_count": os.cpu_count(),
            "tf_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            "pid": os.getpid(),
        }
    )


def build_model(model_json: str, options: SegmentOptions) -> Any:
    """A compiled model for (architecture, compile options), cached per process."""
    compile_json = json.dumps(options.compile.to_dict(), sort_keys=True)
    key = hashlib.sha256((model_json + compile_json).encode()).hexdigest()
    if key in _models:
        _models.move_to_end(key)
        return _models[key]
    try:
        model = rebuilt(model_json, options.threads)
    except Exception as e:
        raise SegmentError(
            f"the model cannot be rebuilt in safe mode ({type(e).__name__}: {e})"
        ) from e
    compiled(model, options.compile)
    model.optimizer.build(model.trainable_variables)
    model._gpcnn_optimizer_start = [v.numpy() for v in model.optimizer.variables]
    _models[key] = model
    while len(_models) > _MODEL_CACHE_SIZE:
        _models.popitem(last=False)
    return model


def reset_optimizer(model: Any) -> None:
    """A fresh optimizer: every slot and the step counter back to their values after build."""
    for var, start in zip(model.optimizer.variables, model._gpcnn_optimizer_start, strict=True):
        var.assign(start)


def set_rate(model: Any, options: SegmentOptions) -> None:
    """The client's learning rate for this iteration, or the step of its learning-rate schedule
    (batches trained so far), so that schedules and callbacks act across merges."""
    step = options.iteration
    if step.learning_rate is not None:
        model.optimizer.learning_rate = float(step.learning_rate)
    if step.optimizer_step is not None:
        model.optimizer.iterations.assign(int(step.optimizer_step))


def seed_everything(model: Any, seed: int | None, iteration: int, shard: int) -> None:
    """Fix Dropout masks and any other randomness for this (run seed, iteration, shard): the
    state of every Keras ``SeedGenerator`` (Keras 3 draws its random ops from these, statelessly),
    and Python's and NumPy's global generators. ``shard`` is the shard's position in the table
    (``SegmentOptions.shard``), not its key: the keys are the engine's choice. Not TensorFlow's
    global seed, as ``keras.utils.set_random_seed`` would: setting it clears TF's kernel cache, so
    the next ``train_on_batch`` instantiates and optimizes the train step again, 4-6x the time of
    a batch (``bench/tf_seed.py``), per segment and iteration; and no op here reads it."""
    if seed is None:
        return
    derived = int.from_bytes(
        hashlib.sha256(f"{seed}/{iteration}/{shard}".encode()).digest()[:4], "little"
    )
    random.seed(derived)
    np.random.seed(derived % (2**31))
    weight_ids = {id(v) for v in model.weights}
    for i, var in enumerate(model.variables):
        if id(var) not in weight_ids and "seed_generator" in var.path:
            var.assign(np.array([(derived + i) % (2**31), 0], dtype=var.dtype))


def shuffled_order(n: int, seed: int | None, iteration: int, shard: int, offset: int) -> np.ndarray:
    """The order in which one buffer's images are trained when ``shuffle`` is on: a new permutation
    every iteration, as Keras's ``fit(shuffle=True)`` inside MADlib's transition gives, but
    reproducible from (run seed, iteration, shard position, images before this buffer). Without
    the shuffle, every epoch ends on the same last batches, and the model measured at the end of an
    epoch leans towards them."""
    if seed is None:
        return np.random.default_rng().permutation(n)
    digest = hashlib.sha256(f"{seed}/{iteration}/{shard}/{offset}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little")).permutation(n)


# -- state encoding -----------------------------------------------------------------------------
#
# An aggregate state is small: a JSON header (image count, loss/metric sums, how much of the start
# vector arrived, a token naming this statement's vectors in this process). Vectors never live in a
# state: the start arrives as chunk rows before the images, is assembled in ``_inbox`` and loaded;
# the trained vector waits in ``_outbox`` until ``state_chunks``, later in the same statement and
# the same process, hands it on as chunk rows. So no value is ever bigger than a chunk, and nothing
# outlives the statement: a stale token is an error, never a silent reuse.

_inbox: dict[str, np.ndarray] = {}
_outbox: dict[str, np.ndarray] = {}
_anchors: dict[str, list] = {}  # a rule's per-step terms, per token (``_anchor``)


def _pack(magic: bytes, header: dict, payload: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return magic + struct.pack("<I", len(head)) + head + payload


def _unpack(data: bytes | memoryview, magic: bytes) -> tuple[dict, memoryview]:
    view = memoryview(data)
    if bytes(view[:4]) != magic:
        raise SegmentError("not a gpcnn aggregate state (wrong magic)")
    (length,) = struct.unpack("<I", view[4:8])
    return json.loads(bytes(view[8 : 8 + length])), view[8 + length :]


def encode_state(header: dict) -> bytes:
    return _pack(STATE_MAGIC, header)


def decode_state(data: bytes | memoryview) -> dict:
    header, _ = _unpack(data, STATE_MAGIC)
    return header


def _new_state(token: str) -> dict:
    return {"count": 0, "sums": {}, "token": token, "received": 0, "chunks": 0, "started": False}


def _receive(state: dict, chunk: int, data: bytes, options: SegmentOptions) -> None:
    """Copy one chunk of the start vector into this statement's buffer, in chunk order."""
    token, size = state["token"], options.transport.vector_size
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
    for box in (_outbox, _anchors):
        for stale in [t for t in box if not t.startswith(statement)]:
            del box[stale]


def _take_start(state: dict, options: SegmentOptions, key: int) -> np.ndarray:
    size = options.transport.vector_size
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
    vector = _outbox.pop(header.get("token"), None)
    if vector is None:
        raise SegmentError(
            f"the trained vector {header.get('token')} is not in this process: the query plan "
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
    header, _ = _unpack(data, RESULT_MAGIC)
    return header


# -- what a merge rule adds to every local step ------------------------------------------------
#
# FedProx and SCAFFOLD act inside the local training, after every batch, on the trainable
# weights only, in float32 NumPy (tests/test_rules_db.py's references do the same operations):
#   FedProx:  w <- w - (lr * mu) * (w - w_sent)
#   SCAFFOLD: w <- w - lr * d,  with d = c - c_i sent after the start's weights (and optimizer)
# where lr is the optimizer's learning rate of that batch, read before it. At the end SCAFFOLD's
# segment returns c_i+ = (w_sent - w) / sum(lr) - d after its trained vector (zero where not
# trainable): the average of the steps' directions, i.e. state derived from its gradients.


def _anchor(model: Any, start: np.ndarray, options: SegmentOptions) -> list:
    """(variable, its sent value, its slice of d or None) per trainable weight, kept from the
    first buffer to the last in ``_anchors``."""
    trainable = {id(v) for v in model.trainable_weights}
    count = sum(wire.sizes(wire.manifest(model)))
    parts, offset = [], 0
    for var in model.weights:
        size = int(np.prod(var.shape, dtype=np.int64))
        if id(var) in trainable:
            sent = start[offset : offset + size].reshape(var.shape).copy()
            d = None
            if options.correction:
                tail = start[start.size - count + offset : start.size - count + offset + size]
                d = tail.reshape(var.shape).copy()
            parts.append((var, sent, d))
        offset += size
    return parts


def _rule_step(model: Any, parts: list, options: SegmentOptions, header: dict):
    """``train_on_batch`` followed by the rule's step; the learning rates summed in ``header``."""
    keras = keras_module()
    mu = np.float32(options.proximal)

    def step(x, y, return_dict: bool = True):
        rate = np.float32(keras.ops.convert_to_numpy(model.optimizer.learning_rate))
        logs = model.train_on_batch(x, y, return_dict=return_dict)
        for var, sent, d in parts:
            w = np.asarray(var.numpy(), np.float32)
            if mu:
                w = w - (rate * mu) * (w - sent)
            if d is not None:
                w = w - rate * d
            var.assign(w)
        header["rate_sum"] = header.get("rate_sum", 0.0) + float(rate)
        return logs

    return step


def _new_control(model: Any, parts: list, rate_sum: float) -> np.ndarray:
    """SCAFFOLD's c_i+ = (w_sent - w) / sum(lr) - d on trainable positions, zero elsewhere."""
    trainable = {id(var): (sent, d) for var, sent, d in parts}
    pieces = []
    for var in model.weights:
        if id(var) in trainable:
            sent, d = trainable[id(var)]
            w = np.asarray(var.numpy(), np.float32)
            pieces.append(((sent - w) / np.float32(rate_sum) - d).ravel())
        else:
            pieces.append(np.zeros(int(np.prod(var.shape, dtype=np.int64)), np.float32))
    return wire.flatten(pieces)


# -- the aggregates -----------------------------------------------------------------------------


def _over_batches(
    step, x: bytes, y: bytes, n: int, options: SegmentOptions, batch_size: int, sums, order=None
) -> None:
    """Run ``step`` (``train_on_batch`` or ``test_on_batch``) over one buffer's mini-batches, in
    ``order`` if given, and add each batch's loss and metrics, weighted by its images, to ``sums``."""
    images = to_model_input(decode_images(x, n, list(options.image_shape)))
    labels = decode_labels(y)
    if order is not None:
        images, labels = images[order], labels[order]
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        logs = step(images[start:stop], labels[start:stop], return_dict=True)
        for name, value in logs.items():
            sums[name] = sums.get(name, 0.0) + float(value) * (stop - start)


def _next_row(
    state: bytes | None, key: int, chunk: int | None, data: bytes | None, options: SegmentOptions
) -> tuple[dict, bool]:
    """(state, whether to process the row's buffer now). The segment's first buffer comes once
    per chunk of its start vector (joined to it, in chunk order): each row adds its chunk, and
    the buffer is processed with the last one."""
    token = f"{options.transport.transfer}/{key}"
    header = _new_state(token) if state is None else decode_state(state)
    if chunk is None:
        return header, True
    _receive(header, int(chunk), data, options)
    return header, header["received"] == options.transport.vector_size


def train_transition(
    state: bytes | None,
    key: int,
    chunk: int | None,
    data: bytes | None,
    x: bytes,
    y: bytes,
    n: int,
    model_json: str,
    options_json: str,
    expected: int,
) -> bytes:
    """One row of a segment's training (see ``_next_row`` for the start's chunks). On the first
    buffer the start is loaded (the weights, then the optimizer state if
    ``options.iteration.optimizer_sent``, else a fresh optimizer), the random state fixed; on the last
    (the image count reaches ``expected``) the trained vector (weights, then optimizer variables
    unless the policy is "reset") goes to the outbox for ``state_chunks``."""
    options = SegmentOptions.from_json(options_json)
    header, ready = _next_row(state, key, chunk, data, options)
    if not ready:
        return encode_state(header)
    model = build_model(model_json, options)
    keep_optimizer = options.optimizer_state != "reset"
    iteration, shard = options.iteration.iteration, options.shard(key)
    ruled = options.proximal != 0 or options.correction
    if not header["started"]:
        start = _take_start(header, options, key)
        count = sum(wire.sizes(wire.manifest(model)))
        _set_weights(model, start[:count])
        if options.iteration.optimizer_sent:
            wire.set_optimizer_vector(model, start[count : start.size - count * options.correction])
        else:
            reset_optimizer(model)
        set_rate(model, options)
        if ruled:
            _anchors[header["token"]] = _anchor(model, start, options)
        del start
        seed_everything(model, options.seed, iteration, shard)
    order = None
    if options.shuffle:
        order = shuffled_order(n, options.seed, iteration, shard, header["count"])
    sums = header["sums"]
    step = model.train_on_batch
    if ruled:
        step = _rule_step(model, _anchors[header["token"]], options, header)
    _over_batches(step, x, y, n, options, int(options.batch_size), sums, order)
    header["count"] += n
    if header["count"] > expected:
        raise SegmentError(f"saw {header['count']} images, more than the {expected} expected")
    if header["count"] == expected:
        extra = list(model.optimizer.variables) if keep_optimizer else []
        vector = wire.vector_of(list(model.weights) + extra)
        parts = _anchors.pop(header["token"], None)
        if options.correction:
            vector = np.concatenate([vector, _new_control(model, parts, header["rate_sum"])])
        _outbox[header["token"]] = vector
    return encode_state(header)


def evaluate_transition(
    state: bytes | None,
    key: int,
    chunk: int | None,
    data: bytes | None,
    x: bytes,
    y: bytes,
    n: int,
    model_json: str,
    options_json: str,
) -> bytes:
    """Loss and metrics of the sent weights on one buffer, summed over images; the weights
    arrive in chunks with the first buffer, as training's start does."""
    options = SegmentOptions.from_json(options_json)
    header, ready = _next_row(state, key, chunk, data, options)
    if not ready:
        return encode_state(header)
    model = build_model(model_json, options)
    if not header["started"]:
        _set_weights(model, _take_start(header, options, key))
    _over_batches(model.test_on_batch, x, y, n, options, EVALUATION_BATCH, header["sums"])
    header["count"] += n
    return encode_state(header)


def _set_weights(model: Any, weights: bytes | np.ndarray) -> None:
    """Load weights into the cached model."""
    wire.set_model_weights(model, weights)


def predict_transition(
    state: bytes | None,
    key: int,
    chunk: int | None,
    data: bytes | None,
    x: bytes,
    n: int,
    model_json: str,
    options_json: str,
) -> bytes:
    """One row of a segment's prediction, a window aggregate over the key's buffers in order: the
    weights arrive in chunks with the first buffer, as training's start does (never one value,
    so any model training can store predicts); each buffer's class probabilities (float32
    (n, classes) little-endian) ride in the state's payload until the next row, for
    ``predicted``."""
    options = SegmentOptions.from_json(options_json)
    header, ready = _next_row(state, key, chunk, data, options)
    if not ready:
        return encode_state(header)
    model = build_model(model_json, options)
    if not header["started"]:
        _set_weights(model, _take_start(header, options, key))
    images = to_model_input(decode_images(x, n, list(options.image_shape)))
    probabilities = np.asarray(model.predict_on_batch(images), dtype="<f4")
    return _pack(STATE_MAGIC, header, probabilities.tobytes())


def predicted(state: bytes | None) -> bytes | None:
    """The probabilities of the buffer the row completed; None on the rows of the weights' other
    chunks."""
    if state is None:
        return None
    return bytes(_unpack(state, STATE_MAGIC)[1]) or None


def prediction_rows(
    probabilities: bytes, ids: bytes, top_k: int
) -> list[tuple[int, int, int, float]]:
    """(id, rank, class, probability) of each image's ``top_k`` most probable classes, rank 1
    the prediction (ties: the lower class first), for predictions written into a table."""
    image_ids = np.frombuffer(ids, dtype="<i8")
    n = image_ids.size
    table = np.frombuffer(probabilities, dtype="<f4").reshape(n, -1)
    top_k = min(int(top_k), table.shape[1])
    order = np.argsort(-table, axis=1, kind="stable")[:, :top_k]
    return [
        (int(image_ids[i]), rank + 1, int(c), float(table[i, c]))
        for i in range(n)
        for rank, c in enumerate(order[i])
    ]


def add_states(a: bytes | None, b: bytes | None) -> bytes | None:
    """Two small states added: image counts and loss/metric sums (vectors merge by chunk)."""
    if a is None:
        return b
    if b is None:
        return a
    state_a, state_b = decode_state(a), decode_state(b)
    sums_a, sums_b = state_a["sums"], state_b["sums"]
    sums = {k: sums_a.get(k, 0.0) + sums_b.get(k, 0.0) for k in sums_a.keys() | sums_b.keys()}
    return encode_state({"count": state_a["count"] + state_b["count"], "sums": sums})


def state_result(state: bytes | None) -> bytes:
    """The image-weighted loss and metrics of a merged state."""
    if state is None:
        raise SegmentError("no images reached the aggregate: the table or slice is empty")
    return _pack(RESULT_MAGIC, final_metrics(decode_state(state)))


# -- merging vectors chunk by chunk -----------------------------------------------------------
#
# The merge of the K trained vectors runs per chunk (``GROUP BY chunk``): the state of one chunk
# is its image-weighted float64 sum and the exact integer image count, never more than twice a
# chunk. Chunk -1 carries the segments' small states (counts and metric sums) instead.

CHUNK_MAGIC = b"GPCC"


def merge_chunk_transition(state: bytes | None, chunk: int, count: int, data: bytes) -> bytes:
    """Add one segment's chunk: S += n * w (float64), n exact; chunk -1 adds the small states."""
    if chunk < 0:
        previous = None if state is None else _unpack(state, CHUNK_MAGIC)[1]
        return _pack(CHUNK_MAGIC, {"chunk": -1}, add_states(previous, data))
    contribution = averaging.accumulate(wire.from_bytes(data), count)
    if state is None:
        return _pack(
            CHUNK_MAGIC, {"chunk": int(chunk), "count": int(count)}, contribution.tobytes()
        )
    header, payload = _unpack(state, CHUNK_MAGIC)
    total = np.frombuffer(payload, dtype="<f8") + contribution
    return _pack(CHUNK_MAGIC, {**header, "count": header["count"] + int(count)}, total.tobytes())


def merge_chunk_final(state: bytes | None) -> bytes | None:
    """A chunk of the merged vector (float32 S / n), or the merged small state for chunk -1."""
    if state is None:
        return None
    header, payload = _unpack(state, CHUNK_MAGIC)
    if header["chunk"] < 0:
        return bytes(payload)
    return wire.to_bytes(averaging.finish(np.frombuffer(payload, dtype="<f8"), header["count"]))


def on_segment(key: int, function, *args):
    """``function(*args)`` for segment ``key``: what it raises reaches the client as
    ``SegmentError: segment <key>: <type>: <message>`` and the line of gpcnn's code it came
    through (the client's ``gpcnn.errors`` reads them back), whatever the dispatch."""
    try:
        return function(*args)
    except Exception as e:
        what = str(e) if isinstance(e, SegmentError) else f"{type(e).__name__}: {e}"
        raise SegmentError(f"segment {key}: {what}\n(raised at {_origin(e)})") from e


def _origin(error: BaseException) -> str:
    """The innermost frame of gpcnn's code (else of any code) in the error's traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if os.path.basename(os.path.dirname(f.filename)) == "gpcnn"]
    frame = (ours or frames)[-1]
    path = f"gpcnn/{os.path.basename(frame.filename)}" if ours else frame.filename
    return f"{path}, line {frame.lineno}, in {frame.name}"
