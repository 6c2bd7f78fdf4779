"""Weights into a Keras model from flat vectors (``kernel.wire``), as the segments and the client
load them: every kind of source memory gives the same model, and the model never shares the
source's memory. Plain Python, no database."""

from __future__ import annotations

import numpy as np
import pytest

from gpcnn.kernel import keras_setup, wire

keras = keras_setup.keras_module()


def odd_model():
    """Variables whose sizes (7 x 5, 5, 5 x 3, 3) put most of them off 64-byte boundaries."""
    return keras.Sequential(
        [keras.Input((7,)), keras.layers.Dense(5), keras.layers.Dense(3, activation="softmax")]
    )


def sources(values: np.ndarray) -> dict:
    aligned = wire.aligned_empty(values.size)
    aligned[:] = values
    shifted = np.empty(values.size + 1, dtype=wire.WIRE_DTYPE)[1:]
    shifted[:] = values
    return {
        "bytes": values.tobytes(),
        "read-only view": wire.from_bytes(values.tobytes()),
        "aligned vector": aligned,
        "misaligned vector": shifted,
    }


@pytest.mark.parametrize("kind", ["bytes", "read-only view", "aligned vector", "misaligned vector"])
def test_weights_load_the_same_from_any_source_memory(kind):
    model = odd_model()
    count = sum(wire.sizes(wire.manifest(model)))
    values = np.random.default_rng(0).standard_normal(count).astype(wire.WIRE_DTYPE)
    wire.set_model_weights(model, sources(values)[kind])
    assert np.array_equal(wire.vector_of(list(model.weights)), values)


def test_a_loaded_model_shares_no_memory_with_its_source():
    """Even from memory TensorFlow could take as it is (aligned, writable), the model gets a copy
    of its own: training leaves the source (a rule's anchor) untouched, and refilling the source
    (the client's merge buffer, every iteration) leaves the model untouched."""
    model = odd_model()
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy")
    count = sum(wire.sizes(wire.manifest(model)))
    start = wire.aligned_empty(count)
    start[:] = np.random.default_rng(1).standard_normal(count)
    kept = start.copy()
    wire.set_model_weights(model, start)
    x = np.random.default_rng(2).standard_normal((4, 7)).astype("float32")
    model.train_on_batch(x, np.array([0, 1, 2, 0]))
    trained = wire.vector_of(list(model.weights))
    assert np.array_equal(start, kept)
    assert not np.array_equal(trained, kept)
    start[:] = 0
    assert np.array_equal(wire.vector_of(list(model.weights)), trained)


@pytest.mark.parametrize("size", [1, 15, 16, 1000])
def test_an_aligned_vector_starts_on_the_boundary_tensorflow_needs(size):
    vector = wire.aligned_empty(size)
    assert vector.size == size and vector.dtype == wire.WIRE_DTYPE
    assert vector.ctypes.data % wire.TF_ALIGNMENT == 0


def test_the_vector_of_a_model_holds_its_weights_and_optimizer_counters_as_float32():
    """``vector_of`` reads each variable through a view of TensorFlow's memory; integer variables
    (the optimizer's step counter) arrive as float32 values, as the wire carries them."""
    model = odd_model()
    model.compile(optimizer=keras.optimizers.SGD(0.5, momentum=0.9), loss="mse")
    model.optimizer.build(model.trainable_variables)
    model.optimizer.iterations.assign(7)
    vector = wire.vector_of(list(model.weights) + list(model.optimizer.variables))
    expected = np.concatenate(
        [np.ravel(v.numpy()).astype("float32") for v in model.weights + model.optimizer.variables]
    )
    assert vector.dtype == wire.WIRE_DTYPE
    assert np.array_equal(vector, expected)
    assert 7.0 in vector


def test_an_optimizer_vector_round_trips_with_its_integer_counter():
    """``set_optimizer_vector`` takes the same path for the float32 slots (a slice of the start
    vector, so misaligned) and casts the integer step counter."""
    model = odd_model()
    model.compile(optimizer=keras.optimizers.SGD(0.5, momentum=0.9), loss="mse")
    model.optimizer.build(model.trainable_variables)
    count = wire.optimizer_vector(model).size
    values = np.arange(1, count + 2, dtype=wire.WIRE_DTYPE)[1:]  # a misaligned view
    wire.set_optimizer_vector(model, values)
    assert np.array_equal(wire.optimizer_vector(model), values)
    assert int(model.optimizer.iterations.numpy()) == int(values[0])
