"""FedNova and pooled BatchNorm statistics by hand, without a database: each
rule's arithmetic on small vectors, FedNova's normalizer against Keras's own SGD, and the pooled
statistics against those of the union of the segments' values."""

from __future__ import annotations

import numpy as np
import pytest

from gpcnn.fit import rules
from gpcnn.fit.compiling import stored_optimizer
from gpcnn.fit.rules.fednova import momentum_of, normalizer
from gpcnn.kernel import averaging, keras_setup, layout, wire

keras = keras_setup.keras_module()

KEYS = [0, 1]


def f32(*values) -> np.ndarray:
    return np.array(values, np.float32)


def sgd(momentum: float = 0.0, nesterov: bool = False) -> dict:
    return stored_optimizer(keras.optimizers.SGD(0.1, momentum=momentum, nesterov=nesterov))


def bn_model():
    keras.utils.set_random_seed(7)
    return keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(3),
            keras.layers.BatchNormalization(),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )


# -- FedNova ----------------------------------------------------------------------------------


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("steps", [1, 3, 10])
def test_fednova_normalizer_is_the_total_weight_keras_sgd_gives_a_constant_gradient(
    steps, nesterov
):
    rho = 0.9
    variable = keras.Variable(np.zeros(1, np.float32))
    optimizer = keras.optimizers.SGD(1.0, momentum=rho, nesterov=nesterov)
    gradient = keras.ops.convert_to_tensor(np.ones(1, np.float32))
    for _ in range(steps):
        optimizer.apply_gradients([(gradient, variable)])
    moved = -float(keras.ops.convert_to_numpy(variable)[0])
    assert normalizer(steps, rho, nesterov) == pytest.approx(moved, rel=1e-5)
    assert normalizer(steps) == steps


def test_fednova_reads_the_momentum_of_sgd_only():
    assert momentum_of(sgd(0.9)) == (0.9, False)
    assert momentum_of(sgd(0.5, nesterov=True)) == (0.5, True)
    assert momentum_of(sgd()) == (0.0, False)
    assert momentum_of(stored_optimizer(keras.optimizers.Adam(0.1))) == (0.0, False)
    assert momentum_of(None) == (0.0, False)


def by_hand(start, segments, counts, steps, rho, server_lr=1.0):
    """wbar = w_start - server_lr tau_eff sum p_k (w_start - w_k) / a_k, a_k summed term by term:
    the gradient of step t enters with 1 + rho + ... + rho^(tau_k - t)."""
    total = sum(counts.values())
    a = {k: sum(rho**j for t in range(n) for j in range(n - t)) for k, n in steps.items()}
    tau_eff = sum(counts[k] / total * a[k] for k in segments)
    step = sum(counts[k] / total * (start - segments[k].astype(float)) / a[k] for k in segments)
    return start - server_lr * tau_eff * step


@pytest.mark.parametrize(("rho", "server_lr"), [(0.0, 1.0), (0.9, 1.0), (0.9, 0.5)])
def test_fednova_by_hand(rho, server_lr):
    start = f32(1, 2, 3)
    segments = {0: f32(0, 1, 5), 1: f32(2, 4, 1)}
    counts, steps = {0: 30, 1: 90}, {0: 2, 1: 6}
    rule = rules.make_rule(
        "fednova", [True, True, True], 2, optimizer=sgd(rho), server_lr=server_lr
    )
    rule.start(start, KEYS)
    average = averaging.weighted_average(list(segments.values()), list(counts.values()))
    rule.merge(average, segments, counts, steps)
    want = by_hand(start.astype(float), segments, counts, steps, rho, server_lr)
    np.testing.assert_allclose(rule.model(), want, rtol=1e-6)
    assert np.abs(rule.model() - average).max() > 0.1  # unequal steps move it off the average


def test_fednova_with_equal_steps_is_the_average_and_leaves_non_trainables_averaged():
    start = f32(1, 2, 0.5)
    segments = {0: f32(0, 1, 0.25), 1: f32(2, 4, 1)}
    counts = {0: 1, 1: 3}
    rule = rules.make_rule("fednova", [True, True, False], 2, optimizer=sgd(0.9))
    rule.start(start, KEYS)
    average = averaging.weighted_average(list(segments.values()), list(counts.values()))
    rule.merge(average, segments, counts, {0: 4, 1: 4})
    np.testing.assert_allclose(rule.model(), average, rtol=1e-6)
    rule.merge(average, segments, counts, {0: 1, 1: 9})
    assert rule.model()[2] == average[2]  # a BatchNorm statistic: the average
    assert rule.needs_segments and not rule.per_segment and rule.sends_model()


def test_fednova_restore_continues_from_the_stored_model_alone():
    rule = rules.make_rule("fednova", [True, True, True], 2)
    rule.restore(f32(1, 2, 3), None, {})
    assert rule.state() is None
    np.testing.assert_array_equal(rule.sent(KEYS), f32(1, 2, 3))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"server_lr": 0}, "server_lr=0 is out of range: server_lr must be > 0"),
        ({"server_lr": True}, "server_lr=True is not a finite real number"),
        ({"rho": 0.9}, "rho=0.9 is not an option: fednova takes server_lr, batchnorm_statistics"),
    ],
)
def test_fednova_refuses_bad_options_before_any_work(options, message):
    with pytest.raises(ValueError, match=message):
        rules.make_rule("fednova", [True], 2, **options)


# -- pooled BatchNorm statistics --------------------------------------------------------------


def test_moving_statistics_are_the_positions_of_each_batchnorm_layers_mean_and_variance():
    model = bn_model()
    means, variances = layout.moving_statistics(wire.manifest(model))
    flat = wire.flatten(model.get_weights())
    bn = model.layers[1]
    flat[means] = np.arange(3)
    flat[variances] = 10 + np.arange(3)
    wire.set_model_weights(model, flat)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(bn.moving_mean), [0, 1, 2])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(bn.moving_variance), [10, 11, 12])
    none = layout.moving_statistics(wire.manifest(keras.Sequential([keras.layers.Dense(2)])))
    assert [a.size for a in none] == [0, 0]


def test_moving_statistics_refuse_a_mean_without_its_variance():
    entries = [{"name": "bn/moving_mean", "shape": [2]}, {"name": "bn/gamma", "shape": [2]}]
    with pytest.raises(ValueError, match="layer 'bn': a moving mean and a moving variance"):
        layout.moving_statistics(entries)


# Two segments' values of one feature (two channels), and their union: the union's mean and
# variance are what pooling must give, from each segment's mean and variance and count alone.
SEGMENT_VALUES = {
    0: np.array([[1.0, 10.0], [2.0, 10.0], [3.0, 13.0]]),
    1: np.array([[7.0, -1.0], [9.0, -3.0], [8.0, -2.0], [8.0, -2.0], [8.0, -2.0]]),
}


def segment_vector(values: np.ndarray) -> np.ndarray:
    """[a trainable weight, mean of the 2 channels, variance of the 2 channels]."""
    return np.concatenate([[0.5], values.mean(0), values.var(0)]).astype(np.float32)


MEANS, VARIANCES = np.array([1, 2]), np.array([3, 4])
MASK = np.array([True, False, False, False, False])


@pytest.mark.parametrize("name", ["average", "bmuf", "fedadam", "scaffold", "fednova", "none"])
def test_pooled_statistics_are_the_mean_and_variance_of_the_union(name):
    union = np.concatenate(list(SEGMENT_VALUES.values()))
    segments = {k: segment_vector(v) for k, v in SEGMENT_VALUES.items()}
    counts = {k: len(v) for k, v in SEGMENT_VALUES.items()}
    rule = rules.make_rule(
        name, MASK, 2, statistics=(MEANS, VARIANCES), batchnorm_statistics="pooled"
    )
    rule.start(segment_vector(union), KEYS)
    extras = {"controls": {k: np.zeros(5, np.float32) for k in KEYS}} if name == "scaffold" else {}
    average = averaging.weighted_average(list(segments.values()), list(counts.values()))
    rule.merge(average, segments, counts, {0: 1, 1: 2}, **extras)
    merged = rule.model()
    np.testing.assert_allclose(merged[MEANS], union.mean(0), rtol=1e-6)
    np.testing.assert_allclose(merged[VARIANCES], union.var(0), rtol=1e-6)
    assert rule.needs_segments
    # averaged (the default): the mean of the variances, which drops the spread of the means
    plain = rules.make_rule(name, MASK, 2, statistics=(MEANS, VARIANCES))
    plain.start(segment_vector(union), KEYS)
    plain.merge(average, segments, counts, {0: 1, 1: 2}, **extras)
    np.testing.assert_array_equal(plain.model()[VARIANCES], average[VARIANCES])
    assert (merged[VARIANCES] > plain.model()[VARIANCES] + 1).all()


def test_pooled_statistics_leave_every_other_weight_as_the_average():
    segments = {k: segment_vector(v) for k, v in SEGMENT_VALUES.items()}
    counts = {0: 3, 1: 5}
    rule = rules.make_rule(
        "average", MASK, 2, statistics=(MEANS, VARIANCES), batchnorm_statistics="pooled"
    )
    rule.start(segments[0], KEYS)
    average = averaging.weighted_average(list(segments.values()), list(counts.values()))
    rule.merge(average, segments, counts, {0: 1, 1: 1})
    np.testing.assert_array_equal(rule.model()[:3], average[:3])
    assert rule.average_buffer() is None  # the next model is not the average


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "union",
            r"batchnorm_statistics=\'union\' is not a choice: batchnorm_statistics must "
            r'be "averaged" \(each moving statistic the image-weighted mean\) or "pooled"',
        ),
        (True, "batchnorm_statistics=True is not a choice"),
        (1, "batchnorm_statistics=1 is not a choice"),
    ],
)
def test_a_bad_batchnorm_statistics_value_is_refused(value, message):
    with pytest.raises(ValueError, match=message):
        rules.check_options("bmuf", {"batchnorm_statistics": value}, 2)


def test_pooled_statistics_are_refused_for_a_model_without_batchnorm():
    with pytest.raises(ValueError, match="the model has no BatchNormalization moving statistics"):
        rules.make_rule("average", MASK, 2, batchnorm_statistics="pooled")
    with pytest.raises(ValueError, match="the model has no BatchNormalization"):
        empty = (np.zeros(0, int), np.zeros(0, int))
        rules.make_rule("fedprox", MASK, 2, statistics=empty, batchnorm_statistics="pooled")
