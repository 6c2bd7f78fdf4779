"""Keras model weights <-> flat little-endian float32 bytes, with a shape manifest.

Weights travel between the client and the segments as raw bytes (never pickle): the concatenation of
every array of ``model.get_weights()`` in order, float32 little-endian. The manifest (JSON-able list of
``{"name", "shape", "dtype", "trainable"}``) is taken from the model, so the bytes alone carry no
structure. This module runs inside the database too: it imports only numpy at module level.
"""

from __future__ import annotations

from typing import Any

import numpy as np

WIRE_DTYPE = np.dtype("<f4")


class WeightsError(ValueError):
    """Weights and model disagree, or the model cannot travel as float32."""


def manifest(model: Any) -> list[dict]:
    """One entry per array of ``model.get_weights()``; refuses models that are not all float32."""
    trainable = {id(v) for v in model.trainable_weights}
    entries = []
    for v in model.weights:
        dtype = str(getattr(v, "dtype", "float32"))
        if dtype != "float32":
            raise WeightsError(
                f"weight {v.path} is {dtype}: gpcnn moves float32 weights only "
                "(mixed-precision models are not supported yet)"
            )
        entries.append(
            {
                "name": v.path,
                "shape": list(v.shape),
                "dtype": dtype,
                "trainable": id(v) in trainable,
            }
        )
    return entries


def sizes(entries: list[dict]) -> list[int]:
    return [int(np.prod(e["shape"], dtype=np.int64)) for e in entries]


def trainable_mask(entries: list[dict]) -> np.ndarray:
    """Boolean mask over the flat vector: True where the weight is trainable."""
    return np.concatenate(
        [
            np.full(n, e["trainable"], dtype=bool)
            for e, n in zip(entries, sizes(entries), strict=True)
        ]
        or [np.zeros(0, dtype=bool)]
    )


def flatten(arrays: list[np.ndarray]) -> np.ndarray:
    """The flat float32 vector of a list of arrays."""
    if not arrays:
        return np.zeros(0, dtype=WIRE_DTYPE)
    return np.concatenate([np.asarray(a, dtype=np.float32).ravel() for a in arrays])


def vector_of(variables: list) -> np.ndarray:
    """The flat float32 vector of Keras variables, filled one variable at a time, each read
    through a view of TensorFlow's memory (DLPack): one copy per value, where ``var.numpy()``
    makes two and ``get_weights`` then ``flatten`` holds the model twice."""
    import tensorflow as tf

    counts = [int(np.prod(v.shape, dtype=np.int64)) for v in variables]
    out = np.empty(sum(counts), dtype=WIRE_DTYPE)
    start = 0
    for var, n in zip(variables, counts, strict=True):
        if n:
            out[start : start + n] = _view_of(tf.convert_to_tensor(var.value)).ravel()
        start += n
    return out


def _view_of(tensor: Any) -> np.ndarray:
    """A numpy view of a tensor's memory; a copy with TensorFlow releases whose tensors have no
    ``__dlpack__`` (gpcnn asks the server for 2.16 or later, and 2.12 lacked it)."""
    return np.from_dlpack(tensor) if hasattr(tensor, "__dlpack__") else tensor.numpy()


def unflatten(flat: np.ndarray, entries: list[dict]) -> list[np.ndarray]:
    """Split a flat vector back into arrays shaped as the manifest says."""
    counts = sizes(entries)
    if flat.size != sum(counts):
        raise WeightsError(f"{flat.size} weight values for a model of {sum(counts)}")
    out, start = [], 0
    for e, n in zip(entries, counts, strict=True):
        out.append(np.asarray(flat[start : start + n], dtype=np.float32).reshape(e["shape"]))
        start += n
    return out


def to_bytes(flat: np.ndarray) -> bytes:
    return np.asarray(flat, dtype=WIRE_DTYPE).tobytes()


def from_bytes(data: bytes | memoryview) -> np.ndarray:
    """The flat float32 vector of weight bytes (a read-only view: copy before changing it)."""
    return np.frombuffer(data, dtype=WIRE_DTYPE)


def model_to_bytes(model: Any) -> bytes:
    return to_bytes(flatten(model.get_weights()))


def set_model_weights(model: Any, data: bytes | memoryview | np.ndarray) -> None:
    """Load flat weights (bytes or vector) into a Keras model, each variable from one copy of its
    values into fresh aligned memory. ``model.set_weights`` makes three of a numpy array (a
    defensive copy, one into aligned memory, the assign), each into fresh memory: 28-40 % of a
    segment's samples per iteration at 25M weights (docs/benchmarks.md)."""
    flat = data if isinstance(data, np.ndarray) else from_bytes(data)
    for variable, array in zip(model.weights, unflatten(flat, manifest(model)), strict=True):
        _assign(variable, array)


def _assign(variable: Any, values: np.ndarray) -> None:
    """Float32 ``values`` into a variable of their size: over DLPack for a float32 variable, cast
    for another (the optimizer's integer step counter)."""
    values = values.reshape(variable.shape)
    if values.size and str(variable.dtype) == "float32":
        variable.assign(_tensor_of_copy(values))
    else:
        variable.assign(values.astype(variable.dtype))


TF_ALIGNMENT = 64  # bytes: TensorFlow aborts the process on a tensor over memory aligned less


def aligned_empty(size: int) -> np.ndarray:
    """An uninitialised float32 vector whose data starts on a ``TF_ALIGNMENT`` boundary, so that
    it can become a tensor without a copy."""
    spare = TF_ALIGNMENT // WIRE_DTYPE.itemsize
    raw = np.empty(size + spare, dtype=WIRE_DTYPE)
    skip = (-raw.ctypes.data % TF_ALIGNMENT) // WIRE_DTYPE.itemsize
    return raw[skip : skip + size]


def _tensor_of_copy(array: np.ndarray) -> Any:
    """A TensorFlow tensor over a fresh aligned copy of ``array`` (DLPack: the copy is the only
    one). Never over the caller's memory: the assign sometimes keeps a tensor's memory as the
    variable's own instead of copying it, and the caller's array may change later (the client's
    merge refills its vector every iteration; a rule keeps the segment's start as its anchor)."""
    import tensorflow as tf

    copy = aligned_empty(array.size).reshape(array.shape)
    np.copyto(copy, array)
    return tf.experimental.dlpack.from_dlpack(copy.__dlpack__())


def optimizer_vector(model: Any) -> np.ndarray:
    """The optimizer's variables (step counter, slots such as momentum) as one float32 vector."""
    return vector_of(model.optimizer.variables)


def set_optimizer_vector(model: Any, flat: np.ndarray) -> None:
    variables = model.optimizer.variables
    expected = sum(int(np.prod(v.shape, dtype=np.int64)) for v in variables)
    if flat.size != expected:
        raise WeightsError(f"{flat.size} optimizer values for an optimizer of {expected}")
    start = 0
    for var in variables:
        n = int(np.prod(var.shape, dtype=np.int64))
        _assign(var, np.asarray(flat[start : start + n]))
        start += n
