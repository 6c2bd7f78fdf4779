"""The functions the database calls, by the names ``engines/functions.py`` gives them
(``segment.<name>``): the training, evaluation and prediction transitions, one segment at a time.

Plain Python: the installer copies this module (with the rest of ``gpcnn.kernel``) into the bodies of
the ``plpython3u`` functions, and tests import it directly. The options of every call arrive as the
JSON of ``protocol.SegmentOptions``. Everything arrives as arguments: nothing here
reads tables (on Greenplum a UDF may not query during a distributed query).

The training aggregate, MADlib-style (docs/design.md, The aggregate protocol), with every vector in chunks:
- ``train_transition`` runs once per row. The segment's first buffer comes once per chunk of its
  start vector (joined from ``transfers``): the chunks are assembled in this process
  (``states``), then the cached model takes the weights, the optimizer is reset (or set) and the
  random state fixed (``keras_state``), and every buffer is trained with a ``train_on_batch`` loop
  (followed by the rule's ``local_steps``), accumulating image-weighted loss and metrics. Every
  random stream derives from the shard's position (``SegmentOptions.shard``), never from the key,
  which the engine chose. On the last buffer (the image count reaches ``expected``) the trained
  vector goes to this process's outbox; the state itself only ever holds counts, sums and a token.
- ``state_chunks`` (later in the same statement, same process) hands the vector on as chunk rows.
- ``merge_chunk_transition`` / ``merge_chunk_final`` merge one chunk of the K vectors: float64
  sums of ``n * w``, exact integer counts, then ``S / n`` (``merging``).
- ``add_states`` / ``state_result`` add small states and give the image-weighted loss and metrics.

The functions of the other modules that the database calls (and the client reads states with)
are imported here, so that every ``segment.<name>`` resolves (``__all__``).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import wire
from .averaging import squared_distance
from .keras_setup import compiled, rebuilt
from .keras_state import reset_optimizer, seed_everything, set_rate, shuffled_order
from .layout import OPTIMIZER, WEIGHTS, model_layout
from .local_steps import LocalSteps, sends
from .protocol import SegmentOptions
from .segment_errors import SegmentError
from .states import (
    STATE_MAGIC,
    begun,
    decode_state,
    encode_state,
    finished,
    hooks,
    new_state,
    outbox,
    pack,
    receive,
    statement_transport,
    take_start,
    unpack,
)

__all__ = [
    "build_model",
    "decode_images",
    "decode_labels",
    "evaluate_transition",
    "predict_transition",
    "predicted",
    "prediction_rows",
    "to_model_input",
    "train_transition",
]

LABEL_DTYPE = np.dtype("<i4")
FEATURE_DTYPE = np.dtype("<f4")  # feature rows (N, F) of floats, stored as they are
EVALUATION_BATCH = 1000  # images per test_on_batch call: only speed depends on it
_MODEL_CACHE_SIZE = 4

_models: OrderedDict[str, Any] = OrderedDict()


# -- images -------------------------------------------------------------------------------------


def to_model_input(images: np.ndarray) -> np.ndarray:
    """The one conversion of stored uint8 images to model input: ``float32(x) / 255``.

    The segments apply it to every buffer of images they train, evaluate or predict on; apply
    it too to images given to a fitted model outside gpcnn, to feed it what it trained on.

    Parameters
    ----------
    images : array-like
        Pixels 0..255, of any shape (such as uint8 (N, H, W, C)).

    Returns
    -------
    ndarray of float32
        The pixels scaled to [0, 1], in the same shape.

    Examples
    --------
    >>> import numpy as np
    >>> from gpcnn.models import to_model_input
    >>> to_model_input(np.array([0, 51, 255], dtype=np.uint8))
    array([0. , 0.2, 1. ], dtype=float32)
    """
    return np.asarray(images, dtype=np.float32) / np.float32(255.0)


def decode_images(data: bytes | memoryview, n: int, image_shape: Sequence[int]) -> np.ndarray:
    """The pixels of one buffer, shaped (n, *image_shape): uint8 images, or float32 feature rows
    (a buffer of 4 bytes per value). The shape is the model's input, of as many values as the
    table's items: the in-database reshape of flat rows."""
    values = n * math.prod(image_shape)
    dtype = np.uint8 if memoryview(data).nbytes == values else FEATURE_DTYPE
    return np.frombuffer(data, dtype=dtype).reshape((n, *image_shape))


def buffer_input(images: np.ndarray) -> np.ndarray:
    """A decoded buffer as model input: uint8 pixels through ``to_model_input``, float32
    feature rows as they are."""
    return images if images.dtype == FEATURE_DTYPE else to_model_input(images)


def decode_labels(data: bytes | memoryview) -> np.ndarray:
    return np.frombuffer(data, dtype=LABEL_DTYPE)


# -- the aggregates -----------------------------------------------------------------------------


def _over_batches(
    step, x: bytes, y: bytes, n: int, options: SegmentOptions, batch_size: int, sums, order=None
) -> None:
    """Run ``step`` (``train_on_batch`` or ``test_on_batch``) over one buffer's mini-batches, in
    ``order`` if given, and add each batch's loss and metrics, weighted by its images, to ``sums``."""
    images = buffer_input(decode_images(x, n, list(options.image_shape)))
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
    transport = statement_transport(options)
    token = f"{transport.transfer}/{key}"
    header = new_state(token) if state is None else decode_state(state)
    if chunk is None:
        return header, True
    if data is None:  # the chunk and its data come in the same row of the start's table
        raise SegmentError(f"start chunk {chunk} arrived without its values")
    receive(header, int(chunk), data, options)
    return header, header["received"] == transport.vector_size


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
    unless the policy is "reset") goes to the outbox for ``state_chunks``, and the state records
    the step's squared length against the start's weights (``states.finished``). Every row adds
    its seconds to the state's ``seconds``."""
    began = time.perf_counter()
    options = SegmentOptions.from_json(options_json)
    header, ready = _next_row(state, key, chunk, data, options)
    if not ready:
        return _timed(header, began)
    model = build_model(model_json, options)
    keep_optimizer = options.optimizer_state != "reset"
    iteration, shard = options.iteration.iteration, options.shard(key)
    steps = dict(options.local_steps)
    if not header["started"]:
        start = take_start(header, options, key)
        count = sum(wire.sizes(wire.manifest(model)))
        parts = model_layout(count, sends(steps)).split(start)
        _set_weights(model, parts[WEIGHTS])
        if options.iteration.optimizer_sent:
            wire.set_optimizer_vector(model, parts[OPTIMIZER])
        else:
            reset_optimizer(model)
        set_rate(model, options)
        if steps:
            hooks[header["token"]] = LocalSteps(model, start, steps)
        weights = parts[WEIGHTS]  # a copy only when the start holds more than the weights
        begun[header["token"]] = weights if weights.size == start.size else weights.copy()
        del start, parts
        seed_everything(model, options.seed, iteration, shard)
    order = None
    if options.shuffle:
        order = shuffled_order(n, options.seed, iteration, shard, header["count"])
    sums = header["sums"]
    step = hooks[header["token"]].train_on_batch if steps else model.train_on_batch
    _over_batches(step, x, y, n, options, int(options.batch_size), sums, order)
    header["count"] += n
    if header["count"] > expected:
        raise SegmentError(f"saw {header['count']} images, more than the {expected} expected")
    if header["count"] == expected:
        extra = list(model.optimizer.variables) if keep_optimizer else []
        vector = wire.vector_of(list(model.weights) + extra)
        local = hooks.pop(header["token"], None)
        extras = {} if local is None else local.returned()
        if extras:  # what the hooks give back ends the vector (``layout.model_layout``)
            vector = np.concatenate([vector, *extras.values()])
        outbox[header["token"]] = vector
        step2 = squared_distance(vector[: begun[header["token"]].size], begun.pop(header["token"]))
        finished(header, key, shard, step2)
    return _timed(header, began)


def _timed(header: dict, began: float) -> bytes:
    """The state with the seconds since ``began`` added to its ``seconds``."""
    header["seconds"] = header.get("seconds", 0.0) + (time.perf_counter() - began)
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
        _set_weights(model, take_start(header, options, key))
    _over_batches(model.test_on_batch, x, y, n, options, EVALUATION_BATCH, header["sums"])
    header["count"] += n
    return encode_state(header)


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
        _set_weights(model, take_start(header, options, key))
    images = buffer_input(decode_images(x, n, list(options.image_shape)))
    probabilities = np.asarray(model.predict_on_batch(images), dtype="<f4")
    return pack(STATE_MAGIC, header, probabilities.tobytes())


def predicted(state: bytes | None) -> bytes | None:
    """The probabilities of the buffer the row completed; None on the rows of the weights' other
    chunks."""
    if state is None:
        return None
    return bytes(unpack(state, STATE_MAGIC)[1]) or None


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
