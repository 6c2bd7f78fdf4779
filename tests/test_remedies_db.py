"""FedNova, pooled BatchNorm statistics and the robust rules in the real database, both
dispatch modes: a fit equals, to the last bit, an in-process reference that trains each key as its
segment does and merges with the same rule; a resumed fit equals the whole one.

Label-skewed 2-segment tables (unequal shards, so the segments take unequal numbers of steps), the
tiny CNN of test_training.py with a BatchNormalization layer for the pooled statistics, SGD with
momentum 0.9 (FedNova's correction), one TF thread per segment, fixed seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_rules_db import BATCH, LEARNING_RATE, MOMENTUM, SEED, fit, fit_resumed, flat, shards
from tiny import learnable_images, tiny_cnn

from gpcnn.data.tables import describe, load_images
from gpcnn.fit import rules
from gpcnn.fit.compiling import stored_optimizer
from gpcnn.kernel import averaging, keras_setup, keras_state, layout, segment, wire
from gpcnn.kernel.keras_setup import compiled_model
from gpcnn.kernel.protocol import CompileOptions

pytestmark = pytest.mark.every_dispatch

keras = keras_setup.keras_module()

TRAIN = "gpcnn_remedies_test.train"
MOMENTUM_SGD = stored_optimizer(keras.optimizers.SGD(LEARNING_RATE, momentum=0.9))


@pytest.fixture(scope="module")
def table(db, schema):
    skewed = {"distribution": "label-skew", "skew": 0.5, "seed": 4, "progress": False}
    images, labels = learnable_images(150)
    load_images(db, TRAIN, images, labels, segments=2, buffer_size=20, replace=True, **skewed)
    info = describe(db, TRAIN)
    sizes = info.images_per_segment
    assert abs(sizes[0] - sizes[1]) > 20, sizes  # shards unequal: steps unequal
    return info


@pytest.fixture(scope="module")
def bn_cnn():
    """The tiny CNN with BatchNormalization after its convolution (seed 7)."""
    keras.utils.set_random_seed(7)
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(3, 3),
            keras.layers.BatchNormalization(),
            keras.layers.Activation("relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )


def reference_rule(model, name: str, **options) -> rules.MergeRule:
    manifest = wire.manifest(model)
    return rules.make_rule(
        name,
        wire.trainable_mask(manifest),
        2,
        statistics=layout.moving_statistics(manifest),
        optimizer=MOMENTUM_SGD,
        **options,
    )


def merged_in_process(model, info, buffers, iterations: int, rule: rules.MergeRule):
    """Each key trains the sent model with a fresh SGD+momentum over its buffers in order, in
    mini-batches of ``BATCH``, as its segment does; ``rule`` merges the trained models with the
    steps each key took. Returns the model after ``iterations``."""
    local = compiled_model(model.to_json(), CompileOptions(MOMENTUM_SGD))  # as each segment's
    local.optimizer.build(local.trainable_variables)
    fresh = wire.optimizer_vector(local)
    keys = list(info.keys)
    counts = {k: sum(len(labels) for _, labels in buffers[k]) for k in keys}
    rule.start(wire.flatten(model.get_weights()), keys)
    for iteration in range(1, iterations + 1):
        trained, steps = {}, {}
        for key in keys:
            wire.set_model_weights(local, rule.sent(keys))
            wire.set_optimizer_vector(local, fresh)
            keras_state.seed_everything(local, SEED, iteration, key)
            steps[key] = 0
            for images, labels in buffers[key]:
                x = segment.to_model_input(images)
                for i in range(0, len(x), BATCH):
                    local.train_on_batch(x[i : i + BATCH], labels[i : i + BATCH])
                    steps[key] += 1
            trained[key] = wire.flatten(local.get_weights())
        average = averaging.weighted_average([trained[k] for k in keys], [counts[k] for k in keys])
        rule.merge(average, trained, counts, steps)
    return rule.model()


def test_fednova_normalizes_each_segments_steps_as_the_in_process_reference_and_resumes(
    db, schema, table, bn_cnn
):
    model = bn_cnn
    params = dict(merge="fednova", merge_options={"server_lr": 0.9}, **MOMENTUM)
    whole = fit(db, schema, model, table=TRAIN, iterations=2, **params)
    reference = reference_rule(model, "fednova", server_lr=0.9)
    want = merged_in_process(model, table, shards(db, table), 2, reference)
    np.testing.assert_array_equal(flat(whole), want)
    assert len(set(reference.normalizers().values())) == 2  # unequal shards, unequal steps
    average = fit(db, schema, model, table=TRAIN, iterations=2, **MOMENTUM)
    assert np.abs(flat(whole) - flat(average)).max() > 1e-4
    resumed = fit_resumed(db, schema, model, 2, table=TRAIN, **params)
    np.testing.assert_array_equal(flat(resumed), flat(whole))


@pytest.mark.parametrize("name", ["average", "bmuf"])
def test_pooled_batchnorm_statistics_merge_as_the_in_process_reference_and_resume(
    db, schema, table, bn_cnn, name
):
    model = bn_cnn
    params = dict(merge=name, merge_options={"batchnorm_statistics": "pooled"}, **MOMENTUM)
    whole = fit(db, schema, model, table=TRAIN, iterations=2, **params)
    reference = reference_rule(model, name, batchnorm_statistics="pooled")
    want = merged_in_process(model, table, shards(db, table), 2, reference)
    np.testing.assert_array_equal(flat(whole), want)
    averaged = fit(db, schema, model, table=TRAIN, iterations=2, merge=name, **MOMENTUM)
    _, variances = layout.moving_statistics(wire.manifest(model))
    assert (flat(whole)[variances] > flat(averaged)[variances]).any()  # the means' spread
    resumed = fit_resumed(db, schema, model, 2, table=TRAIN, **params)
    np.testing.assert_array_equal(flat(resumed), flat(whole))


@pytest.mark.parametrize("name", ["trimmed-mean", "median"])
def test_the_robust_rules_merge_as_the_in_process_reference_and_resume(
    db, schema, table, bn_cnn, name
):
    model = bn_cnn
    whole = fit(db, schema, model, table=TRAIN, iterations=2, merge=name, **MOMENTUM)
    want = merged_in_process(model, table, shards(db, table), 2, reference_rule(model, name))
    np.testing.assert_array_equal(flat(whole), want)
    resumed = fit_resumed(db, schema, model, 2, table=TRAIN, merge=name, **MOMENTUM)
    np.testing.assert_array_equal(flat(resumed), flat(whole))


def test_pooled_statistics_on_a_model_without_batchnorm_are_refused_before_any_run(
    db, schema, table
):
    with pytest.raises(ValueError, match="no BatchNormalization moving statistics"):
        fit(db, schema, tiny_cnn(), table=TRAIN, merge_options={"batchnorm_statistics": "pooled"})
