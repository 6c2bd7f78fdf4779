"""Transfer learning: a fit from given weights with frozen layers (``trainable=False``) keeps them
bit-identical under every merge rule and optimizer-state policy while the head trains; a frozen
BatchNorm runs in inference mode, as in Keras; a model from a ``.keras`` file keeps its weights."""

from __future__ import annotations

import numpy as np
import pytest
from tiny import learnable_images

import gpcnn
from gpcnn.data.tables import load_images, read_images
from gpcnn.estimator import OPTIMIZER_STATES, GreenplumCNN
from gpcnn.fit import rules
from gpcnn.fit.validation import model_input
from gpcnn.kernel import keras_setup

keras = keras_setup.keras_module()
DATA = "gpcnn_transfer_test"


@pytest.fixture(scope="module")
def table(db):
    x, y = learnable_images(60, seed=5)
    name = f"{DATA}.images"
    load_images(db, name, x, y, segments=2, buffer_size=15, replace=True, progress=False)
    return name


def base(batch_norm: bool = False):
    """A 'pretrained' base (Conv2D, optionally BatchNorm with moved statistics) and a head."""
    keras.utils.set_random_seed(4)
    layers = [keras.Input((8, 8, 1)), keras.layers.Conv2D(3, 3, activation="relu", name="base")]
    if batch_norm:
        layers.append(keras.layers.BatchNormalization(name="norm"))
    layers += [keras.layers.Flatten(), keras.layers.Dense(3, activation="softmax", name="head")]
    model = keras.Sequential(layers)
    if batch_norm:
        norm = model.get_layer("norm")
        gamma, beta, mean, variance = norm.get_weights()
        norm.set_weights([gamma * 1.5, beta + 0.1, mean + 0.2, variance * 2.0])
    return model


def frozen(model, *names: str):
    for name in names:
        model.get_layer(name).trainable = False
    return model


def fit(db, table, model, **params):
    defaults = dict(
        optimizer="adam",
        learning_rate=0.01,
        batch_size=8,
        iterations=2,
        seed=2,
        database=db,
        threads_per_segment=1,
        verbose=0,
    )
    return GreenplumCNN(model, **{**defaults, **params}).fit(table)


def weights_of(model, layer: str) -> list[np.ndarray]:
    return [np.array(w) for w in model.get_layer(layer).get_weights()]


def assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def assert_moved(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert any(not np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("policy", OPTIMIZER_STATES)
@pytest.mark.parametrize("merge", list(rules.RULES))
def test_a_frozen_conv2d_stays_bit_identical_while_the_head_trains(db, table, merge, policy):
    model = frozen(base(), "base")
    est = fit(db, table, model, merge=merge, optimizer_state=policy)
    assert_same(weights_of(est.model_, "base"), weights_of(model, "base"))
    assert_moved(weights_of(est.model_, "head"), weights_of(model, "head"))
    assert not est.model_.get_layer("base").trainable


@pytest.mark.parametrize("merge", list(rules.RULES))
def test_a_frozen_batch_norm_keeps_its_statistics_and_runs_in_inference_mode(db, table, merge):
    model = frozen(base(batch_norm=True), "base", "norm")
    est = fit(db, table, model, merge=merge)
    assert_same(weights_of(est.model_, "norm"), weights_of(model, "norm"))
    assert_same(weights_of(est.model_, "base"), weights_of(model, "base"))
    assert_moved(weights_of(est.model_, "head"), weights_of(model, "head"))


def test_one_segment_with_a_frozen_batch_norm_equals_plain_keras_in_inference_mode(db):
    """Keras trains a frozen BatchNorm in inference mode (its moving statistics normalise, not
    the batch's): one segment trains what plain Keras trains, batch for batch."""
    x, y = learnable_images(64, seed=6)
    name = f"{DATA}.one_segment"
    load_images(db, name, x, y, segments=1, buffer_size=16, replace=True, progress=False)
    model = frozen(base(batch_norm=True), "base", "norm")
    est = fit(db, name, model, optimizer="sgd", learning_rate=0.1, iterations=1)
    plain = keras.models.model_from_json(model.to_json())
    plain.set_weights(model.get_weights())
    plain.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    images, labels = read_images(db, name)
    inputs = model_input(images)
    for start in range(0, len(inputs), 8):
        plain.train_on_batch(inputs[start : start + 8], labels[start : start + 8])
    for got, want in zip(est.model_.get_weights(), plain.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    assert_moved(weights_of(est.model_, "head"), weights_of(model, "head"))


def test_a_trainable_batch_norm_moves_its_statistics_which_freezing_prevents(db, table):
    model = frozen(base(batch_norm=True), "base")
    est = fit(db, table, model, iterations=1)
    _, _, mean, variance = weights_of(est.model_, "norm")
    _, _, mean0, variance0 = weights_of(model, "norm")
    assert not np.array_equal(mean, mean0) and not np.array_equal(variance, variance0)


def test_a_model_from_a_keras_file_trains_its_head_from_the_stored_weights(db, table, tmp_path):
    pretrained = base()
    pretrained.set_weights([w + 0.05 for w in pretrained.get_weights()])
    path = tmp_path / "pretrained.keras"
    pretrained.save(path)
    model = frozen(keras.saving.load_model(path, safe_mode=True, compile=False), "base")
    est = fit(db, table, model, merge="bmuf")
    assert_same(weights_of(est.model_, "base"), weights_of(pretrained, "base"))
    assert_moved(weights_of(est.model_, "head"), weights_of(pretrained, "head"))

    gpcnn.store_model(db, "transfer-base", model, replace=True)  # the frozen flag is kept
    try:
        by_name = fit(db, table, "transfer-base", merge="bmuf")
    finally:
        gpcnn.delete_model(db, "transfer-base")
    assert_same(weights_of(by_name.model_, "base"), weights_of(pretrained, "base"))
    assert_same(weights_of(by_name.model_, "head"), weights_of(est.model_, "head"))
