"""The code that runs inside the database, one segment at a time.

Plain Python: the installer copies this module (with ``weights`` and ``merge``) into the bodies of the
``plpython3u`` functions, and tests import it directly. Everything arrives as arguments: nothing here
reads tables (on Greenplum a UDF may not query during a distributed query).

The training aggregate, MADlib-style (docs/design.md, The aggregate protocol):
- ``train_transition`` runs once per buffer (table row). On a segment's first buffer of an iteration it
  takes the model from the process cache, sets the incoming weights, resets the optimizer and the
  random state, then trains on the buffer with a ``train_on_batch`` loop and accumulates image-weighted
  loss and metrics. On the segment's last buffer (its image count reaches ``expected``) it puts
  ``n * w`` for ALL weights into the state; earlier rows carry only counts and sums.
- ``merge`` adds two states: counts, loss/metric sums and weight sums. Exact int counts, float64 sums.
- ``final`` divides: the image-weighted mean weights, loss and metrics (``merge.finish``).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import tempfile
import traceback
from collections import OrderedDict
from typing import Any

import numpy as np

from . import merge as rules
from . import weights as wire

STATE_MAGIC = b"GPCS"
RESULT_MAGIC = b"GPCR"
LABEL_DTYPE = np.dtype("<i4")
_MODEL_CACHE_SIZE = 4
EVALUATION_BATCH = 1000  # images per test_on_batch call: only speed depends on it

_models: OrderedDict[str, Any] = OrderedDict()
_threads: int | None = None


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


def pixel_bytes(values: list, normalized: bool) -> bytes:
    """Images' numbers (0..255, or 0..1 when ``normalized``; one image or a list of them) as
    stored uint8 bytes, rounded to the nearest level (``pack_table``; the range is checked)."""
    pixels = np.asarray(values, dtype=np.float64)
    if normalized:
        pixels = pixels * 255.0
    return np.rint(pixels).astype(np.uint8).tobytes()


def little_endian(values: list[int], width: int) -> bytes:
    """Integers as little-endian bytes of ``width`` (4: labels, 8: ids), in the stored layout."""
    return np.asarray(values, dtype=f"<i{int(width)}").tobytes()


# -- TensorFlow in this process ---------------------------------------------------------------


def keras_module(threads: int | None = None) -> Any:
    """Import Keras, fixing TensorFlow's settings first (thread counts only work before TF starts)."""
    global _threads
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    if not os.environ.get("HOME") and "KERAS_HOME" not in os.environ:
        os.environ["KERAS_HOME"] = os.path.join(tempfile.gettempdir(), "gpcnn-keras")
    if not sys.argv:
        sys.argv = ["gpcnn"]  # absl and friends index sys.argv, which is empty in a backend
    import tensorflow as tf

    if _threads is None and threads:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(int(threads))
            tf.config.threading.set_inter_op_parallelism_threads(int(threads))
            _threads = int(threads)
        except RuntimeError:  # TF already initialised in this process by someone else
            _threads = tf.config.threading.get_intra_op_parallelism_threads() or None
    import keras

    return keras


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


def build_model(model_json: str, options: dict) -> Any:
    """A compiled model for (architecture, compile options), cached per process."""
    key = hashlib.sha256((model_json + json.dumps(options["compile"], sort_keys=True)).encode())
    key = key.hexdigest()
    if key in _models:
        _models.move_to_end(key)
        return _models[key]
    keras = keras_module(options.get("threads"))
    try:
        model = keras.saving.deserialize_keras_object(json.loads(model_json), safe_mode=True)
    except Exception as e:
        raise SegmentError(
            f"the model cannot be rebuilt in safe mode ({type(e).__name__}: {e})"
        ) from e
    compile_options = options["compile"]
    model.compile(
        optimizer=keras.optimizers.deserialize(compile_options["optimizer"]),
        loss=compile_options["loss"],
        metrics=list(compile_options["metrics"]),
    )
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


def set_rate(model: Any, options: dict) -> None:
    """The client's learning rate for this iteration, or the step of its learning-rate schedule
    (batches trained so far), so that schedules and callbacks act across merges."""
    if options.get("learning_rate") is not None:
        model.optimizer.learning_rate = float(options["learning_rate"])
    if options.get("optimizer_step") is not None:
        model.optimizer.iterations.assign(int(options["optimizer_step"]))


def seed_everything(model: Any, seed: int | None, iteration: int, key: int) -> None:
    """Fix Dropout masks and any other randomness for this (run seed, iteration, segment)."""
    if seed is None:
        return
    keras = keras_module()
    derived = int.from_bytes(
        hashlib.sha256(f"{seed}/{iteration}/{key}".encode()).digest()[:4], "little"
    )
    keras.utils.set_random_seed(derived % (2**31))
    weight_ids = {id(v) for v in model.weights}
    for i, var in enumerate(model.variables):
        if id(var) not in weight_ids and "seed_generator" in var.path:
            var.assign(np.array([(derived + i) % (2**31), 0], dtype=var.dtype))


def shuffled_order(n: int, seed: int | None, iteration: int, key: int, position: int) -> np.ndarray:
    """The order in which one buffer's images are trained when ``shuffle`` is on: a new permutation
    every iteration, as Keras's ``fit(shuffle=True)`` inside MADlib's transition gives, but
    reproducible from (run seed, iteration, segment, images before this buffer). Without the
    shuffle, every epoch ends on the same last batches, and the model measured at the end of an
    epoch leans towards them."""
    if seed is None:
        return np.random.default_rng().permutation(n)
    digest = hashlib.sha256(f"{seed}/{iteration}/{key}/{position}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little")).permutation(n)


# -- state encoding -----------------------------------------------------------------------------


def _pack(magic: bytes, header: dict, payload: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return magic + struct.pack("<I", len(head)) + head + payload


def _unpack(data: bytes | memoryview, magic: bytes) -> tuple[dict, memoryview]:
    view = memoryview(data)
    if bytes(view[:4]) != magic:
        raise SegmentError("not a gpcnn aggregate state (wrong magic)")
    (length,) = struct.unpack("<I", view[4:8])
    return json.loads(bytes(view[8 : 8 + length])), view[8 + length :]


def encode_state(count: int, sums: dict[str, float], weight_sum: np.ndarray | None) -> bytes:
    header = {"count": int(count), "sums": sums, "has_weights": weight_sum is not None}
    payload = b"" if weight_sum is None else np.asarray(weight_sum, dtype="<f8").tobytes()
    return _pack(STATE_MAGIC, header, payload)


def decode_state(data: bytes | memoryview) -> tuple[int, dict[str, float], np.ndarray | None]:
    header, payload = _unpack(data, STATE_MAGIC)
    weight_sum = np.frombuffer(payload, dtype="<f8") if header["has_weights"] else None
    return header["count"], header["sums"], weight_sum


def decode_result(data: bytes | memoryview) -> tuple[dict, np.ndarray | None]:
    """A final value: ``({"images", "loss", metrics...}, float32 weights or None)``."""
    header, payload = _unpack(data, RESULT_MAGIC)
    flat = wire.from_bytes(payload) if header.pop("has_weights") else None
    return header, flat


# -- the aggregates -----------------------------------------------------------------------------


def _over_batches(
    step, x: bytes, y: bytes, n: int, options: dict, batch_size: int, sums, order=None
) -> None:
    """Run ``step`` (``train_on_batch`` or ``test_on_batch``) over one buffer's mini-batches, in
    ``order`` if given, and add each batch's loss and metrics, weighted by its images, to ``sums``."""
    images = to_model_input(decode_images(x, n, options["image_shape"]))
    labels = decode_labels(y)
    if order is not None:
        images, labels = images[order], labels[order]
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        logs = step(images[start:stop], labels[start:stop], return_dict=True)
        for name, value in logs.items():
            sums[name] = sums.get(name, 0.0) + float(value) * (stop - start)


def train_transition(
    state: bytes | None,
    key: int,
    x: bytes,
    y: bytes,
    n: int,
    model_json: str,
    options_json: str,
    weights: bytes,
    optimizer: bytes | None,
    expected: int,
) -> bytes:
    """Train on one buffer; see the module docstring for the protocol. With an optimizer-state
    policy other than "reset", ``optimizer`` (if not NULL) is the optimizer state to start from,
    and the optimizer's variables follow the weights in the state vector."""
    options = json.loads(options_json)
    model = build_model(model_json, options)
    keep_optimizer = options.get("optimizer_state", "reset") != "reset"
    if state is None:
        count, sums = 0, {}
        _set_weights(model, weights)
        if keep_optimizer and optimizer is not None:
            wire.set_optimizer_vector(model, wire.from_bytes(optimizer))
        else:
            reset_optimizer(model)
        set_rate(model, options)
        seed_everything(model, options.get("seed"), options.get("iteration", 0), key)
    else:
        count, sums, _ = decode_state(state)
    order = None
    if options.get("shuffle"):
        order = shuffled_order(n, options.get("seed"), options.get("iteration", 0), key, count)
    _over_batches(model.train_on_batch, x, y, n, options, int(options["batch_size"]), sums, order)
    count += n
    if count > expected:
        raise SegmentError(f"saw {count} images, more than the {expected} expected")
    weight_sum = None
    if count == expected:
        vector = wire.flatten(model.get_weights())
        if keep_optimizer:
            vector = np.concatenate([vector, wire.optimizer_vector(model)])
        weight_sum = rules.accumulate(vector, count)
    return encode_state(count, sums, weight_sum)


def evaluate_transition(
    state: bytes | None,
    x: bytes,
    y: bytes,
    n: int,
    model_json: str,
    options_json: str,
    weights: bytes,
) -> bytes:
    """Loss and metrics of the given weights on one buffer, summed over images."""
    options = json.loads(options_json)
    model = build_model(model_json, options)
    if state is None:  # the weights are the same for every row of one aggregate
        _set_weights(model, weights)
    count, sums, _ = (0, {}, None) if state is None else decode_state(state)
    _over_batches(model.test_on_batch, x, y, n, options, EVALUATION_BATCH, sums)
    return encode_state(count + n, sums, None)


def _set_weights(model: Any, weights: bytes, digest: str | None = None) -> None:
    """Load weights into the cached model; ``digest`` names them for ``predict`` (None: unnamed,
    as when training changes them)."""
    wire.set_model_weights(model, weights)
    model._gpcnn_weights_digest = digest


def _probabilities(x: bytes, n: int, model_json: str, options_json: str, weights: bytes):
    options = json.loads(options_json)
    model = build_model(model_json, options)
    digest = hashlib.sha256(weights).hexdigest()  # a plain call per row: load only on a change
    if getattr(model, "_gpcnn_weights_digest", None) != digest:
        _set_weights(model, weights, digest)
    images = to_model_input(decode_images(x, n, options["image_shape"]))
    return np.asarray(model.predict_on_batch(images), dtype="<f4")


def predict(x: bytes, n: int, model_json: str, options_json: str, weights: bytes) -> bytes:
    """Class probabilities of one buffer, float32 (n, classes) little-endian bytes."""
    return _probabilities(x, n, model_json, options_json, weights).tobytes()


def predict_rows(
    x: bytes,
    n: int,
    ids: bytes,
    model_json: str,
    options_json: str,
    weights: bytes,
    top_k: int,
) -> list[tuple[int, int, int, float]]:
    """(id, rank, class, probability) of each image's ``top_k`` most probable classes, rank 1
    the prediction (ties: the lower class first), for predictions written into a table."""
    probabilities = _probabilities(x, n, model_json, options_json, weights)
    top_k = min(int(top_k), probabilities.shape[1])
    order = np.argsort(-probabilities, axis=1, kind="stable")[:, :top_k]
    image_ids = np.frombuffer(ids, dtype="<i8")
    return [
        (int(image_ids[i]), rank + 1, int(c), float(probabilities[i, c]))
        for i in range(n)
        for rank, c in enumerate(order[i])
    ]


def merge(a: bytes | None, b: bytes | None) -> bytes | None:
    """(n1, S1) + (n2, S2) = (n1 + n2, S1 + S2): counts, loss/metric sums, weight sums."""
    if a is None:
        return b
    if b is None:
        return a
    count_a, sums_a, w_a = decode_state(a)
    count_b, sums_b, w_b = decode_state(b)
    sums = {k: sums_a.get(k, 0.0) + sums_b.get(k, 0.0) for k in sums_a.keys() | sums_b.keys()}
    if (w_a is None) != (w_b is None):
        raise SegmentError("cannot merge a finished segment state with an unfinished one")
    return encode_state(count_a + count_b, sums, None if w_a is None else w_a + w_b)


def final(state: bytes | None) -> bytes:
    """w = S / n, plus image-weighted loss and metrics. An empty total is an error."""
    if state is None:
        raise SegmentError("no images reached the aggregate: the table or slice is empty")
    count, sums, weight_sum = decode_state(state)
    if count == 0:
        raise SegmentError("no images reached the aggregate: the table or slice is empty")
    header = {"images": count, **{k: v / count for k, v in sums.items()}}
    header["has_weights"] = weight_sum is not None
    payload = b"" if weight_sum is None else wire.to_bytes(rules.finish(weight_sum, count))
    return _pack(RESULT_MAGIC, header, payload)


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
