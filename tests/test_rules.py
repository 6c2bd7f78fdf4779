"""Merge rules (gpcnn.fit.rules) on small hand-computed vectors, and the weights-vs-gradients algebra.

No database here: the rules are plain numpy, and the weights-vs-gradients part trains tiny Keras
models in this process (one TF thread and oneDNN off, fixed in conftest).

Notation: K = 2 segments with keys 0 and 1 and image counts 1 and 3, 3-element weight vectors.
Every expected number below is written out by hand; the derivation is in the comment beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from gpcnn.fit import rules
from gpcnn.kernel import averaging, keras_setup, wire

keras = keras_setup.keras_module()

KEYS = [0, 1]
COUNTS = {0: 1, 1: 3}
# The options every rule takes, at their defaults.
SHARED = {"batchnorm_statistics": "averaged"}
ALL = np.array([True, True, True])
LAST_FROZEN = np.array([True, True, False])  # position 2 is non-trainable (a BN statistic)


def f32(*values) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def avg(segments: dict[int, np.ndarray]) -> np.ndarray:
    """What the database hands the rule: the count-weighted average of the segment models."""
    return averaging.weighted_average([segments[k] for k in KEYS], [COUNTS[k] for k in KEYS])


# -- the streamed weighted average ------------------------------------------------------------


def test_weighted_average_by_hand():
    # (1 * [1, 2, 3] + 3 * [5, 6, 7]) / 4 = [16, 20, 24] / 4
    got = averaging.weighted_average([f32(1, 2, 3), f32(5, 6, 7)], [1, 3])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, f32(4, 5, 6))


def test_accumulate_and_finish_stream_the_same_average():
    s_a = averaging.accumulate(f32(1, 2, 3), 1)
    s_b = averaging.accumulate(f32(5, 6, 7), 3)
    assert s_a.dtype == np.float64
    np.testing.assert_array_equal(s_b, [15.0, 18.0, 21.0])
    np.testing.assert_array_equal(averaging.finish(s_a + s_b, 4), f32(4, 5, 6))
    with pytest.raises(ValueError, match="no images"):
        averaging.finish(s_a, 0)


def test_counts_are_exact_beyond_float32():
    # 2**24 + 1 is not a float32; in float64 the weighted average stays exact.
    big = 2**24 + 1
    got = averaging.weighted_average([f32(0, 0, 0), f32(2, 2, 2)], [big, big])
    np.testing.assert_array_equal(got, f32(1, 1, 1))


# -- average -----------------------------------------------------------------------------------


def test_average_rule_by_hand():
    rule = rules.make_rule("average", ALL, 2)
    rule.start(f32(0, 0, 0), KEYS)
    np.testing.assert_array_equal(rule.sent(KEYS), f32(0, 0, 0))
    segments = {0: f32(1, 2, 3), 1: f32(5, 6, 7)}
    rule.update(avg(segments), None, COUNTS)
    np.testing.assert_array_equal(rule.model(), f32(4, 5, 6))
    np.testing.assert_array_equal(rule.sent(KEYS), f32(4, 5, 6))
    assert rule.state() is None and not rule.per_segment


# -- bmuf --------------------------------------------------------------------------------------


def test_bmuf_classic_two_iterations_by_hand():
    rule = rules.make_rule("bmuf", ALL, 2, eta=0.5, zeta=2.0, nesterov=False)
    rule.start(f32(0, 0, 0), KEYS)
    # iteration 1: sent w0 = 0; average [4, 5, 6]; G = [4, 5, 6]; D = 0.5*0 + 2*G = [8, 10, 12];
    # w = 0 + D = [8, 10, 12]
    np.testing.assert_array_equal(rule.sent(KEYS), f32(0, 0, 0))
    rule.update(avg({0: f32(1, 2, 3), 1: f32(5, 6, 7)}), None, COUNTS)
    np.testing.assert_array_equal(rule.state(), f32(8, 10, 12))
    np.testing.assert_array_equal(rule.model(), f32(8, 10, 12))
    # iteration 2: sent (classic) = w = [8, 10, 12]; average [10, 10, 10]; G = [2, 0, -2];
    # D = 0.5*[8, 10, 12] + 2*[2, 0, -2] = [8, 5, 2]; w = [16, 15, 14]
    np.testing.assert_array_equal(rule.sent(KEYS), f32(8, 10, 12))
    rule.update(f32(10, 10, 10), None, COUNTS)
    np.testing.assert_array_equal(rule.state(), f32(8, 5, 2))
    np.testing.assert_array_equal(rule.model(), f32(16, 15, 14))
    np.testing.assert_array_equal(rule.sent(KEYS), f32(16, 15, 14))


def test_bmuf_nesterov_two_iterations_by_hand():
    rule = rules.make_rule("bmuf", ALL, 2, eta=0.5, zeta=1.0, nesterov=True)
    rule.start(f32(0, 0, 0), KEYS)
    # iteration 1: D0 = 0, so sent = w0 + 0.5*D0 = 0; average [4, 5, 6]; G = [4, 5, 6];
    # D = [4, 5, 6]; w = [4, 5, 6]
    np.testing.assert_array_equal(rule.sent(KEYS), f32(0, 0, 0))
    rule.update(avg({0: f32(1, 2, 3), 1: f32(5, 6, 7)}), None, COUNTS)
    np.testing.assert_array_equal(rule.state(), f32(4, 5, 6))
    np.testing.assert_array_equal(rule.model(), f32(4, 5, 6))
    # iteration 2: sent = w + 0.5*D = [6, 7.5, 9]; average [8, 8, 8]; G = avg - sent =
    # [2, 0.5, -1]; D = 0.5*[4, 5, 6] + [2, 0.5, -1] = [4, 3, 2]; w = [4, 5, 6] + D = [8, 8, 8]
    np.testing.assert_array_equal(rule.sent(KEYS), f32(6, 7.5, 9))
    rule.update(f32(8, 8, 8), None, COUNTS)
    np.testing.assert_array_equal(rule.state(), f32(4, 3, 2))
    np.testing.assert_array_equal(rule.model(), f32(8, 8, 8))
    # next sent = [8, 8, 8] + 0.5*[4, 3, 2] = [10, 9.5, 9]; the evaluated model stays w
    np.testing.assert_array_equal(rule.sent(KEYS), f32(10, 9.5, 9))
    np.testing.assert_array_equal(rule.model(), f32(8, 8, 8))


def test_bmuf_restore_continues_with_the_stored_momentum():
    whole = rules.make_rule("bmuf", ALL, 2, eta=0.5, zeta=1.0, nesterov=True)
    whole.start(f32(0, 0, 0), KEYS)
    whole.sent(KEYS)
    whole.update(f32(4, 5, 6), None, COUNTS)
    resumed = rules.make_rule("bmuf", ALL, 2, eta=0.5, zeta=1.0, nesterov=True)
    resumed.restore(whole.model().copy(), whole.state().copy(), {})
    for rule in (whole, resumed):
        np.testing.assert_array_equal(rule.sent(KEYS), f32(6, 7.5, 9))
        rule.update(f32(8, 8, 8), None, COUNTS)
    np.testing.assert_array_equal(resumed.model(), whole.model())
    np.testing.assert_array_equal(resumed.state(), whole.state())


def test_bmuf_non_trainable_positions_take_the_plain_average():
    # Position 2 is a BatchNorm moving variance: start 1.0, the segments measured 0.5 and 0.25,
    # so the average is (1*0.5 + 3*0.25)/4 = 0.3125. With momentum on it, D = 2*(0.3125 - 1)
    # = -1.375 and the variance would become 1 - 1.375 = -0.375 (negative).
    rule = rules.make_rule("bmuf", LAST_FROZEN, 2, eta=0.5, zeta=2.0, nesterov=False)
    rule.start(f32(0, 0, 1), KEYS)
    # trainable positions as in the classic example: [8, 10]
    rule.sent(KEYS)
    rule.update(avg({0: f32(1, 2, 0.5), 1: f32(5, 6, 0.25)}), None, COUNTS)
    np.testing.assert_array_equal(rule.model(), f32(8, 10, 0.3125))
    np.testing.assert_array_equal(rule.state(), f32(8, 10, 0))  # no momentum on it
    np.testing.assert_array_equal(rule.sent(KEYS), f32(8, 10, 0.3125))
    rule.update(f32(10, 10, 0.75), None, COUNTS)
    np.testing.assert_array_equal(rule.model(), f32(16, 15, 0.75))
    np.testing.assert_array_equal(rule.state(), f32(8, 5, 0))

    unmasked = rules.make_rule("bmuf", ALL, 2, eta=0.5, zeta=2.0, nesterov=False)
    unmasked.start(f32(0, 0, 1), KEYS)
    unmasked.sent(KEYS)
    unmasked.update(f32(4, 5, 0.3125), None, COUNTS)
    assert unmasked.model()[2] == pytest.approx(-0.375)  # what the mask prevents


def test_bmuf_nesterov_sends_no_lookahead_on_non_trainable_positions():
    rule = rules.make_rule("bmuf", LAST_FROZEN, 2, eta=0.5, zeta=1.0, nesterov=True)
    rule.start(f32(0, 0, 1), KEYS)
    rule.sent(KEYS)
    rule.update(f32(4, 5, 0.5), None, COUNTS)
    # trainable: w = D = [4, 5], sent = w + 0.5 D = [6, 7.5]; frozen: the average 0.5, as is
    np.testing.assert_array_equal(rule.sent(KEYS), f32(6, 7.5, 0.5))
    rule.update(f32(8, 8, 0.25), None, COUNTS)
    np.testing.assert_array_equal(rule.model(), f32(8, 8, 0.25))
    np.testing.assert_array_equal(rule.sent(KEYS), f32(10, 9.5, 0.25))


@pytest.mark.parametrize("nesterov", [True, False])
def test_bmuf_with_eta_0_and_zeta_1_is_average(nesterov):
    rng = np.random.default_rng(0)
    size = 1000
    mask = rng.random(size) < 0.8
    start = rng.normal(size=size).astype(np.float32)
    bmuf = rules.make_rule("bmuf", mask, 3, eta=0.0, zeta=1.0, nesterov=nesterov)
    average = rules.make_rule("average", mask, 3)
    keys, counts = [0, 1, 2], [10, 20, 35]
    for rule in (bmuf, average):
        rule.start(start, keys)
    for _ in range(6):
        sent_b, sent_a = bmuf.sent(keys), average.sent(keys)
        np.testing.assert_allclose(sent_b, sent_a, rtol=1e-6, atol=1e-7)
        noise = [rng.normal(scale=0.1, size=size).astype(np.float32) for _ in keys]
        merged = {
            name: averaging.weighted_average([s + e for e in noise], counts)
            for name, s in (("bmuf", sent_b), ("average", sent_a))
        }
        bmuf.update(merged["bmuf"], None, dict(zip(keys, counts, strict=True)))
        average.update(merged["average"], None, dict(zip(keys, counts, strict=True)))
        # w + (avg - w) is avg up to one float32 rounding
        np.testing.assert_allclose(bmuf.model(), average.model(), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(bmuf.model(), merged["bmuf"], rtol=1e-6, atol=1e-7)


# -- easgd -------------------------------------------------------------------------------------


def test_easgd_two_iterations_by_hand():
    rule = rules.make_rule("easgd", ALL, 2, alpha=0.25)
    assert rule.per_segment
    rule.start(f32(0, 0, 0), KEYS)
    sent = rule.sent(KEYS)
    assert set(sent) == set(KEYS)
    for k in KEYS:
        np.testing.assert_array_equal(sent[k], f32(0, 0, 0))
    # iteration 1, from c = 0: x0 = [4, 8, 0], x1 = [0, 4, 8]
    # c <- c + 0.25 * ((x0 - c) + (x1 - c)) = 0.25 * [4, 12, 8] = [1, 3, 2]
    # x0 <- x0 - 0.25 * (x0 - c) = [3, 6, 0];  x1 <- [0, 3, 6]   (c before its update)
    segments = {0: f32(4, 8, 0), 1: f32(0, 4, 8)}
    rule.update(avg(segments), segments, COUNTS)
    np.testing.assert_array_equal(rule.model(), f32(1, 3, 2))
    np.testing.assert_array_equal(rule.sent(KEYS)[0], f32(3, 6, 0))
    np.testing.assert_array_equal(rule.sent(KEYS)[1], f32(0, 3, 6))
    # iteration 2, from c = [1, 3, 2]: x0 = [5, 7, 2], x1 = [1, 3, 10]
    # x - c: [4, 4, 0] and [0, 0, 8]; c <- [1, 3, 2] + 0.25 * [4, 4, 8] = [2, 4, 4]
    # x0 <- [5, 7, 2] - [1, 1, 0] = [4, 6, 2];  x1 <- [1, 3, 10] - [0, 0, 2] = [1, 3, 8]
    segments = {0: f32(5, 7, 2), 1: f32(1, 3, 10)}
    rule.update(avg(segments), segments, COUNTS)
    np.testing.assert_array_equal(rule.model(), f32(2, 4, 4))
    np.testing.assert_array_equal(rule.sent(KEYS)[0], f32(4, 6, 2))
    np.testing.assert_array_equal(rule.sent(KEYS)[1], f32(1, 3, 8))
    assert rule.state() is None  # what a resume needs is the centre and the stored locals


def test_easgd_non_trainable_positions_take_the_plain_average():
    # Position 2 non-trainable. Centre: the count-weighted average (1*0 + 3*8)/4 = 6 (elastic
    # would give 0.25 * (0 + 8) = 2); each local keeps what its segment measured (0 and 8).
    rule = rules.make_rule("easgd", LAST_FROZEN, 2, alpha=0.25)
    rule.start(f32(0, 0, 0), KEYS)
    segments = {0: f32(4, 8, 0), 1: f32(0, 4, 8)}
    rule.update(avg(segments), segments, COUNTS)
    np.testing.assert_array_equal(rule.model(), f32(1, 3, 6))
    np.testing.assert_array_equal(rule.sent(KEYS)[0], f32(3, 6, 0))
    np.testing.assert_array_equal(rule.sent(KEYS)[1], f32(0, 3, 8))


def test_easgd_keeps_per_segment_models_distinct():
    rng = np.random.default_rng(1)
    keys = [0, 1, 2, 3]
    rule = rules.make_rule("easgd", np.ones(50, bool), len(keys))
    rule.start(rng.normal(size=50).astype(np.float32), keys)
    for _ in range(3):
        sent = rule.sent(keys)
        segments = {k: sent[k] + rng.normal(scale=0.1, size=50).astype(np.float32) for k in keys}
        average = averaging.weighted_average(list(segments.values()), [1] * len(keys))
        rule.update(average, segments, dict.fromkeys(keys, 1))
        sent = rule.sent(keys)
        for i in keys:
            assert not np.allclose(sent[i], rule.model(), atol=1e-3)
            for j in keys:
                if i < j:
                    assert not np.allclose(sent[i], sent[j], atol=1e-3)


def test_easgd_refuses_k_alpha_of_one_or_more_before_it_starts():
    with pytest.raises(ValueError, match=r"K\*alpha = 2 \* 0.5 = 1$"):
        rules.make_rule("easgd", ALL, 2, alpha=0.5)
    with pytest.raises(ValueError, match=r"K\*alpha = 4 \* 0.3 = 1.2$"):
        rules.make_rule("easgd", ALL, 4, alpha=0.3)
    rules.make_rule("easgd", ALL, 2, alpha=0.49).start(f32(0, 0, 0), KEYS)  # 0.98 < 1 is fine


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_easgd_default_alpha_is_0_9_over_k(k):
    rule = rules.make_rule("easgd", ALL, k)
    assert rule.alpha == pytest.approx(0.9 / k)
    rule.start(f32(0, 0, 0), list(range(k)))  # K * alpha = 0.9 < 1


def test_easgd_restore_takes_the_centre_and_the_stored_locals():
    rule = rules.make_rule("easgd", ALL, 2, alpha=0.25)
    rule.restore(f32(1, 3, 2), None, {0: f32(3, 6, 0), 1: f32(0, 3, 6)})
    segments = {0: f32(5, 7, 2), 1: f32(1, 3, 10)}
    rule.update(avg(segments), segments, COUNTS)
    np.testing.assert_array_equal(rule.model(), f32(2, 4, 4))
    np.testing.assert_array_equal(rule.sent(KEYS)[1], f32(1, 3, 8))


# -- none --------------------------------------------------------------------------------------


def test_none_never_mixes_segments():
    rule = rules.make_rule("none", LAST_FROZEN, 2)
    assert rule.per_segment
    rule.start(f32(0, 0, 0), KEYS)
    # iteration 1: each local is exactly what its segment returned; the model is the one-shot
    # count-weighted average (1*[1, 2, 3] + 3*[5, 6, 7]) / 4 = [4, 5, 6]
    segments = {0: f32(1, 2, 3), 1: f32(5, 6, 7)}
    rule.update(avg(segments), segments, COUNTS)
    sent = rule.sent(KEYS)
    np.testing.assert_array_equal(sent[0], f32(1, 2, 3))
    np.testing.assert_array_equal(sent[1], f32(5, 6, 7))
    np.testing.assert_array_equal(rule.model(), f32(4, 5, 6))
    # iteration 2 and on: still never mixed, whatever the segments return
    rng = np.random.default_rng(2)
    for _ in range(3):
        segments = {k: rng.normal(size=3).astype(np.float32) for k in KEYS}
        rule.update(avg(segments), segments, COUNTS)
        for k in KEYS:
            np.testing.assert_array_equal(rule.sent(KEYS)[k], segments[k])
    # the locals are copies: changing what was handed in changes nothing
    segments[0][:] = 99
    assert not np.any(rule.sent(KEYS)[0] == 99)


# -- make_rule ---------------------------------------------------------------------------------


def test_make_rule_names_and_options():
    assert isinstance(rules.make_rule("average", ALL, 2), rules.Average)
    bmuf = rules.make_rule("bmuf", ALL, 2)
    assert isinstance(bmuf, rules.BlockMomentum)
    assert (bmuf.eta, bmuf.zeta, bmuf.nesterov) == (0.9, 1.0, True)
    assert isinstance(rules.make_rule("easgd", ALL, 2), rules.ElasticAveraging)
    assert isinstance(rules.make_rule("none", ALL, 2), rules.NoMerge)
    assert rules.make_rule("easgd", ALL, 2, alpha=0.1).alpha == 0.1
    with pytest.raises(ValueError, match="krum"):
        rules.make_rule("krum", ALL, 2)
    with pytest.raises(ValueError, match="average, bmuf, easgd, none"):
        rules.make_rule("Average", ALL, 2)
    with pytest.raises(ValueError, match=r"momentum=0\.9 is not an option"):
        rules.make_rule("bmuf", ALL, 2, momentum=0.9)
    with pytest.raises(ValueError, match=r"eta=0\.9 is not an option"):
        rules.make_rule("average", ALL, 2, eta=0.9)
    with pytest.raises(ValueError, match=r"alpha=0\.1 is not an option"):
        rules.make_rule("none", ALL, 2, alpha=0.1)
    with pytest.raises(ValueError, match=r"eta=0\.1 is not an option"):
        rules.make_rule("easgd", ALL, 2, eta=0.1)


@pytest.mark.parametrize(
    ("name", "option"),
    [("easgd", "per_segment"), ("easgd", "locals_"), ("bmuf", "delta"), ("average", "center")],
)
def test_make_rule_refuses_internal_fields_as_options(name, option):
    with pytest.raises(ValueError, match=f"{option}=False is not an option"):
        rules.make_rule(name, ALL, 2, **{option: False})


@pytest.mark.parametrize(
    ("name", "options"),
    [("bmuf", {"eta": 1.5}), ("bmuf", {"etta": 0.5}), ("easgd", {"alpha": 0.5}), ("x", {})],
)
def test_make_rule_raises_what_check_options_raises(name, options):
    with pytest.raises(ValueError) as checked:
        rules.check_options(name, options, 2)
    with pytest.raises(ValueError) as made:
        rules.make_rule(name, ALL, 2, **options)
    assert str(made.value) == str(checked.value)


# -- check_options: merge-rule parameters refused before any work --------------------------------


@pytest.mark.parametrize(
    ("name", "segments", "want"),
    [
        ("average", 2, {}),
        ("none", 3, {}),
        ("bmuf", 2, {"eta": 0.9, "zeta": 1.0, "nesterov": True}),
        ("easgd", 1, {"alpha": 0.9}),
        ("easgd", 4, {"alpha": 0.225}),  # 0.9 / K
    ],
)
def test_check_options_fills_in_the_defaults(name, segments, want):
    assert rules.check_options(name, None, segments) == {**want, **SHARED}
    assert rules.check_options(name, {}, segments) == {**want, **SHARED}


@pytest.mark.parametrize(
    ("name", "options", "want"),
    [
        ("bmuf", {"eta": 0, "zeta": 1}, {"eta": 0.0, "zeta": 1.0, "nesterov": True}),
        ("bmuf", {"eta": 0.999, "nesterov": False}, {"eta": 0.999, "zeta": 1.0, "nesterov": False}),
        ("bmuf", {"zeta": 1e-12}, {"eta": 0.9, "zeta": 1e-12, "nesterov": True}),
        (
            "bmuf",
            {"eta": np.float32(0.5), "zeta": np.int64(2), "nesterov": np.bool_(False)},
            {"eta": 0.5, "zeta": 2.0, "nesterov": False},
        ),
        ("easgd", {"alpha": np.float64(0.3)}, {"alpha": 0.3}),
        ("easgd", {"alpha": 0.33}, {"alpha": 0.33}),  # K*alpha = 0.99 < 1
    ],
)
def test_check_options_passes_valid_options_through_as_python_numbers(name, options, want):
    given = dict(options)
    got = rules.check_options(name, options, 3)
    want = {**want, **SHARED}
    assert got == want
    assert [type(v) for v in got.values()] == [type(v) for v in want.values()]
    assert options == given  # the caller's mapping is left alone


def test_check_options_takes_its_option_names_from_the_rule_class(monkeypatch):
    @dataclass
    class Warmed(rules.ElasticAveraging):
        warmup: bool = False
        ramp: float = field(default=0.0, init=False)  # internal, not an option

    monkeypatch.setitem(rules.RULES, "warmed", Warmed)
    got = rules.check_options("warmed", {"warmup": True}, 2)
    assert got == {"alpha": 0.45, "warmup": True, **SHARED}
    with pytest.raises(ValueError, match=r"warmed takes alpha, warmup, batchnorm_statistics$"):
        rules.check_options("warmed", {"ramp": 1.0}, 2)
    with pytest.raises(ValueError, match="warmup=1 is not a bool"):
        rules.check_options("warmed", {"warmup": 1}, 2)


@pytest.mark.parametrize("name", ["mean", "Average", "", "bmuf "])
def test_check_options_refuses_an_unknown_rule(name):
    with pytest.raises(ValueError) as e:
        rules.check_options(name, None, 2)
    assert str(e.value) == (
        f'merge="{name}": choose one of average, bmuf, easgd, none, fedprox, scaffold, fedadam, '
        "fedyogi, fednova, trimmed-mean, median"
    )


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        (
            "bmuf",
            {"etta": 0.5},
            "etta=0.5 is not an option: bmuf takes eta, zeta, nesterov, batchnorm_statistics",
        ),
        (
            "bmuf",
            {"eta": 0.5, "Zeta": 1},
            "Zeta=1 is not an option: bmuf takes eta, zeta, nesterov, batchnorm_statistics",
        ),
        (
            "bmuf",
            {"etta": 1, "zetta": 2},
            "etta=1, zetta=2 are not options: bmuf takes eta, zeta, nesterov, batchnorm_statistics",
        ),
        (
            "easgd",
            {"eta": 0.1},
            "eta=0.1 is not an option: easgd takes alpha, batchnorm_statistics",
        ),
        (
            "easgd",
            {"trainable": "mask"},
            "trainable='mask' is not an option: easgd takes alpha, batchnorm_statistics",
        ),
        ("average", {"eta": 0.9}, "eta=0.9 is not an option: average takes batchnorm_statistics"),
        ("none", {"alpha": 0.1}, "alpha=0.1 is not an option: none takes batchnorm_statistics"),
    ],
)
def test_check_options_refuses_an_unknown_option_and_lists_the_valid_ones(name, options, message):
    with pytest.raises(ValueError) as e:
        rules.check_options(name, options, 2)
    assert str(e.value) == f'merge="{name}": {message}'


ETA = "eta must be in [0, 1) (eta >= 1 makes the block momentum diverge)"
ZETA = "zeta must be > 0 (zeta <= 0 never steps toward the average)"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"eta": 1.5}, f"eta=1.5 is out of range: {ETA}"),
        ({"eta": 1}, f"eta=1 is out of range: {ETA}"),
        ({"eta": -0.1}, f"eta=-0.1 is out of range: {ETA}"),
        ({"eta": np.float64(1.5)}, f"eta=1.5 is out of range: {ETA}"),  # shown plain
        ({"zeta": 0}, f"zeta=0 is out of range: {ZETA}"),
        ({"zeta": -1.0}, f"zeta=-1.0 is out of range: {ZETA}"),
    ],
)
def test_check_options_refuses_bmuf_values_out_of_range(options, message):
    with pytest.raises(ValueError) as e:
        rules.check_options("bmuf", options, 2)
    assert str(e.value) == f'merge="bmuf": {message}'


@pytest.mark.parametrize(
    ("name", "option"), [("bmuf", "eta"), ("bmuf", "zeta"), ("easgd", "alpha")]
)
@pytest.mark.parametrize(
    "value", [True, False, np.bool_(True), "0.5", None, [0.5], 0.5j, math.nan, math.inf, -math.inf]
)
def test_check_options_refuses_what_is_not_a_finite_real_number(name, option, value):
    with pytest.raises(ValueError, match=f"is not a finite real number: {option} must be"):
        rules.check_options(name, {option: value}, 2)


@pytest.mark.parametrize(
    ("value", "shown"), [(1, "1"), (0, "0"), (1.0, "1.0"), ("True", "'True'"), (None, "None")]
)
def test_check_options_refuses_a_nesterov_that_is_not_a_bool(value, shown):
    with pytest.raises(ValueError) as e:
        rules.check_options("bmuf", {"nesterov": value}, 2)
    assert str(e.value) == (
        f'merge="bmuf": nesterov={shown} is not a bool: nesterov must be True or False'
    )


@pytest.mark.parametrize(
    ("segments", "alpha", "product"),
    [
        (2, -1, "2 * -1 = -2"),
        (2, 0, "2 * 0 = 0"),
        (2, 0.5, "2 * 0.5 = 1"),
        (4, 0.3, "4 * 0.3 = 1.2"),
        (1, 1.0, "1 * 1.0 = 1"),
        (3, 0.34, "3 * 0.34 = 1.02"),
    ],
)
def test_check_options_refuses_an_easgd_alpha_out_of_range(segments, alpha, product):
    with pytest.raises(ValueError) as e:
        rules.check_options("easgd", {"alpha": alpha}, segments)
    assert str(e.value) == (
        f'merge="easgd": alpha={alpha} is out of range: alpha must be > 0 with K*alpha < 1, '
        f"i.e. in (0, {1 / segments:g}) for K={segments} segments; here K*alpha = {product}"
    )


def test_check_options_messages_in_full():
    cases = [
        (
            "bmuf",
            {"eta": 1.5},
            'merge="bmuf": eta=1.5 is out of range: eta must be in [0, 1) '
            "(eta >= 1 makes the block momentum diverge)",
        ),
        (
            "easgd",
            {"alpha": -1},
            'merge="easgd": alpha=-1 is out of range: alpha must be > 0 with K*alpha < 1, '
            "i.e. in (0, 0.5) for K=2 segments; here K*alpha = 2 * -1 = -2",
        ),
        (
            "bmuf",
            {"etta": 0.5},
            'merge="bmuf": etta=0.5 is not an option: bmuf takes eta, zeta, nesterov, '
            "batchnorm_statistics",
        ),
    ]
    for name, options, message in cases:
        with pytest.raises(ValueError) as e:
            rules.check_options(name, options, 2)
        assert str(e.value) == message


# -- fedprox, scaffold, fedadam, fedyogi (client side) -------------------------------------------


def test_fedprox_merges_as_average_and_sends_its_mu_into_the_database():
    rule = rules.make_rule("fedprox", ALL, 2, mu=0.5)
    assert isinstance(rule, rules.Average) and rule.in_database() == {"proximal": 0.5}
    assert rules.make_rule("average", ALL, 2).in_database() == {}
    assert rules.check_options("fedprox", None, 2) == {"mu": 0.01, **SHARED}


def test_fedadam_two_iterations_by_hand():
    rule = rules.make_rule("fedadam", ALL, 2, server_lr=0.1, beta1=0.5, beta2=0.75, tau=0.5)
    rule.start(f32(1, 1, 1), KEYS)
    # G = avg - w = (1, -1, 0); m = 0.5 G; v = 0.75 * 0.25 + 0.25 G^2 = (0.4375, 0.4375, 0.1875)
    rule.update(f32(2, 0, 1), None, COUNTS)
    m = np.array([0.5, -0.5, 0.0])
    v = np.array([0.4375, 0.4375, 0.1875])
    want = 1 + 0.1 * m / (np.sqrt(v) + 0.5)
    np.testing.assert_allclose(rule.model(), want, rtol=1e-6)
    np.testing.assert_allclose(rule.state(), np.concatenate([m, v]), rtol=1e-6)
    w1 = rule.model().astype(np.float64)
    # the second G is taken from the model just made
    g = np.array([2.0, 0.0, 1.0]) - w1
    m2, v2 = 0.5 * m + 0.5 * g, 0.75 * v + 0.25 * g * g
    rule.update(f32(2, 0, 1), None, COUNTS)
    np.testing.assert_allclose(rule.model(), w1 + 0.1 * m2 / (np.sqrt(v2) + 0.5), rtol=1e-6)


def test_fedyogi_moves_v_additively_towards_g_squared():
    rule = rules.make_rule("fedyogi", ALL, 2, server_lr=0.1, beta1=0.5, beta2=0.75, tau=0.5)
    rule.start(f32(1, 1, 1), KEYS)
    # v0 = tau^2 = 0.25; G^2 = (1, 1, 0): v = 0.25 - 0.25 G^2 sign(0.25 - G^2) = (0.5, 0.5, 0.25)
    rule.update(f32(2, 0, 1), None, COUNTS)
    v = rule.state()[3:]
    np.testing.assert_allclose(v, [0.5, 0.5, 0.25], rtol=1e-6)
    np.testing.assert_allclose(
        rule.model(), 1 + 0.1 * np.array([0.5, -0.5, 0]) / (np.sqrt(v) + 0.5), rtol=1e-6
    )


@pytest.mark.parametrize("name", ["fedadam", "fedyogi", "scaffold"])
def test_adaptive_and_scaffold_rules_give_non_trainable_positions_the_plain_average(name):
    rule = rules.make_rule(name, LAST_FROZEN, 2, server_lr=0.5)
    rule.start(f32(1, 1, 1), KEYS)
    segments = {0: f32(3, 0, 5), 1: f32(1, 2, 9)}
    extra = {"controls": {0: f32(1, 1, 0), 1: f32(2, 2, 0)}} if name == "scaffold" else {}
    rule.update(avg(segments), segments, COUNTS, **extra)
    assert rule.model()[2] == avg(segments)[2] == 8


def test_scaffold_by_hand():
    rule = rules.make_rule("scaffold", ALL, 2, server_lr=0.5)
    rule.start(f32(1, 1, 1), KEYS)
    assert rule.per_segment and rule.corrects and rule.in_database() == {"correction": True}
    np.testing.assert_array_equal(rule.correction(0), f32(0, 0, 0))
    segments = {0: f32(3, 1, 1), 1: f32(-1, 1, 1)}  # the average is (0, 1, 1)
    controls = {0: f32(4, 0, 0), 1: f32(0, 8, 0)}
    rule.update(avg(segments), segments, COUNTS, controls=controls)
    # w = 1 + 0.5 (avg - 1) = (0.5, 1, 1); c = 0 + (1 * (4,0,0) + 3 * (0,8,0)) / 4 = (1, 6, 0)
    np.testing.assert_array_equal(rule.model(), f32(0.5, 1, 1))
    np.testing.assert_array_equal(rule.sent(KEYS), f32(0.5, 1, 1))
    np.testing.assert_array_equal(rule.correction(0), f32(1, 6, 0) - f32(4, 0, 0))
    np.testing.assert_array_equal(rule.correction(1), f32(1, 6, 0) - f32(0, 8, 0))
    np.testing.assert_array_equal(rule.state(), np.concatenate([f32(1, 6, 0), *controls.values()]))


@pytest.mark.parametrize("name", ["scaffold", "fedadam", "fedyogi"])
def test_the_new_rules_restore_continues_exactly(name):
    def iterate(rule, step):
        segments = {0: f32(step, 1, 2), 1: f32(0, -step, 1)}
        extra = {}
        if name == "scaffold":
            extra = {"controls": {0: f32(step, 0, 1), 1: f32(0, 2 * step, 0)}}
        rule.update(avg(segments), segments, COUNTS, **extra)

    whole = rules.make_rule(name, ALL, 2)
    whole.start(f32(1, 1, 1), KEYS)
    iterate(whole, 1)
    resumed = rules.make_rule(name, ALL, 2)
    resumed.restore(whole.model(), whole.state(), {k: whole.model() for k in KEYS})
    for step in (2, 3):
        iterate(whole, step)
        iterate(resumed, step)
    np.testing.assert_array_equal(resumed.model(), whole.model())
    np.testing.assert_array_equal(resumed.state(), whole.state())


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("fedprox", {"mu": -0.1}, "mu must be >= 0"),
        ("scaffold", {"server_lr": 0}, "server_lr must be > 0"),
        ("fedadam", {"beta1": 1}, r"beta1 must be in \[0, 1\)"),
        ("fedyogi", {"beta2": -0.5}, r"beta2 must be in \[0, 1\)"),
        ("fedadam", {"tau": 0}, "tau must be > 0"),
        (
            "fedadam",
            {"mu": 0.1},
            "mu=0.1 is not an option: fedadam takes server_lr, beta1, beta2, tau",
        ),
        ("scaffold", {"tau": 0.1}, "tau=0.1 is not an option: scaffold takes server_lr"),
    ],
)
def test_the_new_rules_refuse_options_out_of_range(name, options, message):
    with pytest.raises(ValueError, match=message):
        rules.check_options(name, options, 2)


def test_fedadam_defaults():
    want = {"server_lr": 0.01, "beta1": 0.9, "beta2": 0.99, "tau": 0.001, **SHARED}
    assert rules.check_options("fedadam", None, 4) == want
    assert rules.check_options("fedyogi", {}, 4) == want


def test_the_groupnorm_cnn_is_the_batchnorm_cnn_without_moving_statistics():
    from gpcnn import models

    bn, gn = models.build("bn-cnn"), models.build("gn-cnn")
    kinds = [type(layer).__name__ for layer in gn.layers]
    assert kinds == [
        type(layer).__name__.replace("BatchNormalization", "GroupNormalization")
        for layer in bn.layers
    ]
    assert [w.shape for w in gn.weights] == [w.shape for w in bn.trainable_weights]
    assert not gn.non_trainable_weights
    assert gn.output_shape == bn.output_shape


def test_a_merges_per_epoch_schedule_repeats_its_last_count():
    from gpcnn.fit.schedule import Schedule

    cuts = {2: ["a0", "a1"], 1: ["b0"]}
    schedule = Schedule((2, 2, 1), cuts, epochs=1)
    got = [schedule.at(i) for i in range(1, 8)]
    assert got == [
        ("a0", 0.5),
        ("a1", 1.0),
        ("a0", 1.5),
        ("a1", 2.0),
        ("b0", 3.0),
        ("b0", 4.0),
        ("b0", 5.0),
    ]
    assert Schedule((1,), {1: ["b0"]}, epochs=2).at(3) == ("b0", 6.0)
    assert list(schedule) == ["a0", "a1", "b0"]


# -- weights vs gradients ----------------------------------------------------------------------
#
# K segments with equal shards B_1..B_K of a batch B, plain SGD (w' = w - lr * g), one step per
# merge. The loss is a mean over images, so L_B(w) = mean_k L_{B_k}(w) and g_B(w0) = mean_k g_k(w0).
# Averaging the K models after one step each:
#     mean_k (w0 - lr g_k(w0)) = w0 - lr mean_k g_k(w0) = w0 - lr g_B(w0)
# which is one step on the union batch: averaging weights IS averaging gradients here. It stops
# holding when (a) there are several local steps (g_k is then taken at different points), (b) the
# optimizer has state that the segments do not carry like the single model does (momentum reset
# every iteration; Adam's per-coordinate normalisation is not linear in g), (c) the forward pass
# depends on the batch (BatchNormalization in training mode normalises by per-shard statistics).

LR = 0.5
K = 2
SHARD = 8


def _data(shift: bool = False):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(K * SHARD, 4)).astype(np.float32)
    if shift:  # the shards come from different places: their batch statistics differ
        x[:SHARD] += 2.0
        x[SHARD:] -= 2.0
    y = rng.integers(0, 3, K * SHARD)
    return x, y


def _model(batchnorm: bool = False):
    keras.utils.set_random_seed(9)
    layers = [keras.Input((4,)), keras.layers.Dense(6, activation="tanh")]
    if batchnorm:
        layers.append(keras.layers.BatchNormalization())
    layers.append(keras.layers.Dense(3, activation="softmax"))
    return keras.Sequential(layers)


class Worker:
    """One Keras model that can be loaded with weights (and optimizer state) and stepped."""

    def __init__(self, template, optimizer):
        self.model = keras.models.model_from_json(template.to_json())
        self.model.set_weights(template.get_weights())
        self.model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
        self.model.optimizer.build(self.model.trainable_variables)
        self.fresh = wire.optimizer_vector(self.model)

    def weights(self) -> np.ndarray:
        return wire.flatten(self.model.get_weights())

    def step(self, x, y, weights=None, state=None) -> None:
        if weights is not None:
            wire.set_model_weights(self.model, weights)
        if state is not None:
            wire.set_optimizer_vector(self.model, state)
        self.model.train_on_batch(x, y)

    def state(self) -> np.ndarray:
        return wire.optimizer_vector(self.model)


def _shards(x, y):
    return [(x[k * SHARD : (k + 1) * SHARD], y[k * SHARD : (k + 1) * SHARD]) for k in range(K)]


def _data_parallel(template, x, y, *, optimizer, merges, steps_per_merge, policy="reset"):
    """K workers from the same start, ``steps_per_merge`` full-shard steps each, then the plain
    average of their weights (equal shards); optimizer state per ``policy`` as gpcnn's
    optimizer_state: "reset" (fresh every merge), "local" (each keeps its own), "average"."""
    workers = [Worker(template, optimizer()) for _ in range(K)]
    weights = workers[0].weights()
    states = [w.fresh for w in workers]
    for _ in range(merges):
        models = []
        for k, (xs, ys) in enumerate(_shards(x, y)):
            state = workers[k].fresh if policy == "reset" else states[k]
            workers[k].step(xs, ys, weights, state)
            for _ in range(steps_per_merge - 1):
                workers[k].step(xs, ys)
            models.append(workers[k].weights())
            states[k] = workers[k].state()
        weights = averaging.weighted_average(models, [SHARD] * K)
        if policy == "average":
            states = [averaging.weighted_average(states, [SHARD] * K)] * K
    return weights


def _one_model(template, x, y, *, optimizer, steps):
    """One model on the union batch, its optimizer state kept from step to step."""
    worker = Worker(template, optimizer())
    for _ in range(steps):
        worker.step(x, y)
    return worker.weights()


def sgd():
    return keras.optimizers.SGD(LR)


def momentum():
    return keras.optimizers.SGD(LR, momentum=0.9)


def test_one_sgd_step_then_averaging_weights_equals_one_step_on_the_union_batch():
    x, y = _data()
    template = _model()
    averaged = _data_parallel(template, x, y, optimizer=sgd, merges=1, steps_per_merge=1)
    union = _one_model(template, x, y, optimizer=sgd, steps=1)
    start = wire.flatten(template.get_weights())
    assert np.abs(union - start).max() > 1e-2  # a real step was taken
    np.testing.assert_allclose(averaged, union, atol=1e-6, rtol=0)


def test_averaged_weights_are_the_start_minus_lr_times_the_mean_gradient():
    import tensorflow as tf

    x, y = _data()
    template = _model()
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    assert [id(v) for v in template.trainable_weights] == [id(v) for v in template.weights]

    def gradient(xs, ys):
        with tf.GradientTape() as tape:
            loss = loss_fn(ys, template(xs, training=True))
        return wire.flatten([g.numpy() for g in tape.gradient(loss, template.trainable_weights)])

    grads = [gradient(xs, ys) for xs, ys in _shards(x, y)]
    start = wire.flatten(template.get_weights())
    mean_grad = np.mean(grads, axis=0)
    # the mean of the shard gradients is the gradient of the mean loss on the union batch
    np.testing.assert_allclose(mean_grad, gradient(x, y), atol=1e-6, rtol=0)
    averaged = _data_parallel(template, x, y, optimizer=sgd, merges=1, steps_per_merge=1)
    np.testing.assert_allclose(averaged, start - LR * mean_grad, atol=1e-6, rtol=0)
    # and each segment's own step is w0 - lr g_k: different per segment, equal only on average
    assert np.abs(grads[0] - grads[1]).max() > 1e-2


def test_a_merge_after_every_step_stays_equal_over_several_steps():
    x, y = _data()
    template = _model()
    averaged = _data_parallel(template, x, y, optimizer=sgd, merges=3, steps_per_merge=1)
    union = _one_model(template, x, y, optimizer=sgd, steps=3)
    np.testing.assert_allclose(averaged, union, atol=1e-6, rtol=0)


def test_two_steps_between_merges_break_the_equality():
    x, y = _data()
    template = _model()
    averaged = _data_parallel(template, x, y, optimizer=sgd, merges=1, steps_per_merge=2)
    union = _one_model(template, x, y, optimizer=sgd, steps=2)
    assert np.abs(averaged - union).max() > 1e-4


def test_momentum_reset_at_each_merge_breaks_the_equality_at_the_second_step():
    # The single model keeps its momentum from step 1 to step 2; segments that start every
    # iteration from a fresh optimizer (gpcnn's optimizer_state="reset") do not.
    x, y = _data()
    template = _model()
    first = _data_parallel(template, x, y, optimizer=momentum, merges=1, steps_per_merge=1)
    np.testing.assert_allclose(  # step 1: momentum is still zero everywhere, so equal
        first, _one_model(template, x, y, optimizer=momentum, steps=1), atol=1e-6, rtol=0
    )
    second = _data_parallel(template, x, y, optimizer=momentum, merges=2, steps_per_merge=1)
    union = _one_model(template, x, y, optimizer=momentum, steps=2)
    assert np.abs(second - union).max() > 1e-4


@pytest.mark.parametrize("policy", ["local", "average"])
def test_momentum_kept_by_every_segment_is_linear_and_keeps_the_equality(policy):
    # SGD momentum m <- 0.9 m - lr g is linear in g: with one step per merge, the mean of the
    # segments' momenta is the single model's momentum, so the equality survives. (Adam's is not.)
    x, y = _data()
    template = _model()
    averaged = _data_parallel(
        template, x, y, optimizer=momentum, merges=3, steps_per_merge=1, policy=policy
    )
    union = _one_model(template, x, y, optimizer=momentum, steps=3)
    np.testing.assert_allclose(averaged, union, atol=1e-6, rtol=0)


@pytest.mark.parametrize("policy", ["reset", "local"])
def test_adam_breaks_the_equality_even_at_one_step(policy):
    # Adam's first step is about -lr * g / |g| per coordinate: the mean of the segments' signs
    # is not the sign of the mean gradient.
    x, y = _data()
    template = _model()

    def adam():
        return keras.optimizers.Adam(0.01)

    averaged = _data_parallel(
        template, x, y, optimizer=adam, merges=1, steps_per_merge=1, policy=policy
    )
    union = _one_model(template, x, y, optimizer=adam, steps=1)
    assert np.abs(averaged - union).max() > 1e-4


def test_batchnorm_in_training_mode_breaks_the_equality():
    x, y = _data(shift=True)
    template = _model(batchnorm=True)
    entries = wire.manifest(template)
    trainable = wire.trainable_mask(entries)
    assert not trainable.all()  # BN's moving mean and variance
    averaged = _data_parallel(template, x, y, optimizer=sgd, merges=1, steps_per_merge=1)
    union = _one_model(template, x, y, optimizer=sgd, steps=1)
    # the trainable weights: each shard normalises by its own batch mean and variance
    assert np.abs(averaged[trainable] - union[trainable]).max() > 1e-4
    # the moving variance: the mean of per-shard variances misses the between-shard spread
    variance = [i for i, e in enumerate(entries) if "moving_variance" in e["name"]]
    assert len(variance) == 1
    got = wire.unflatten(averaged, entries)[variance[0]]
    want = wire.unflatten(union, entries)[variance[0]]
    assert np.all(got < want) and np.abs(got - want).max() > 1e-4


def test_rules_say_when_the_next_start_is_the_model_they_store():
    """Only then may an iteration start from the stored checkpoint instead of a transfer."""
    assert rules.make_rule("average", ALL, 2).sends_model()
    assert rules.make_rule("bmuf", ALL, 2, nesterov=False).sends_model()
    assert not rules.make_rule("bmuf", ALL, 2, nesterov=True).sends_model()
    assert not rules.make_rule("easgd", ALL, 2).sends_model()
    assert not rules.make_rule("none", ALL, 2).sends_model()


def test_only_average_lets_the_next_average_overwrite_its_model():
    """The client merges the next average into ``average_buffer()`` as it arrives: only a rule
    whose next model is that average may offer its model; bmuf needs it for its step."""
    made = {name: rules.make_rule(name, ALL, 2) for name in rules.RULES}
    for rule in made.values():
        rule.start(f32(1, 2, 3), KEYS)
    assert made["average"].average_buffer() is made["average"].model()
    assert all(made[name].average_buffer() is None for name in ("bmuf", "easgd", "none"))
    buffer = made["average"].average_buffer()
    buffer[:] = f32(4, 5, 6)  # as the merge writes it
    made["average"].update(buffer, None, COUNTS)
    np.testing.assert_array_equal(made["average"].model(), f32(4, 5, 6))


FIVE = [0, 1, 2, 3, 4]


def robust(name: str, **options) -> rules.MergeRule:
    rule = rules.make_rule(name, ALL, len(FIVE), **options)
    rule.start(f32(0, 0, 0), FIVE)
    return rule


def test_the_trimmed_mean_drops_a_corrupted_segment_and_weights_the_rest_by_images():
    segments = {k: f32(k, 10 - k, 1) for k in FIVE}
    segments[4] = f32(1e6, -1e6, 1e6)  # one segment's rows corrupted
    counts = {0: 1, 1: 2, 2: 1, 3: 1, 4: 1}
    rule = robust("trimmed-mean", trim=0.2)  # one segment dropped at each end of every weight
    rule.merge(f32(0, 0, 0), segments, counts, {})
    # weight 0: 0 and 1e6 dropped, (1·2 + 2 + 3) / 4; weight 1: -1e6 and 10 dropped (9·2 + 8 + 7) / 4
    np.testing.assert_allclose(rule.model(), f32(7 / 4, 33 / 4, 1), rtol=1e-6)
    assert rule.needs_segments and rule.sends_model()


def test_a_trimmed_mean_that_drops_no_segment_is_the_average():
    rule = rules.make_rule("trimmed-mean", ALL, 2)
    rule.start(f32(0, 0, 0), KEYS)
    rule.merge(f32(4, 5, 6), {0: f32(1, 2, 3), 1: f32(5, 6, 7)}, COUNTS, {})
    np.testing.assert_array_equal(rule.model(), f32(4, 5, 6))


def test_the_median_ignores_image_counts_and_a_minority_of_bad_segments():
    segments = {k: f32(k, -k, 7) for k in FIVE}
    segments[0] = segments[1] = f32(-1e9, 1e9, 7)
    rule = robust("median")
    rule.merge(f32(0, 0, 0), segments, {k: 100 if k < 2 else 1 for k in FIVE}, {})
    np.testing.assert_array_equal(rule.model(), f32(2, -2, 7))


def test_a_trim_of_half_the_segments_or_more_is_refused_before_any_work():
    with pytest.raises(ValueError, match=r"trim=0.5.*in \[0, 0.5\)"):
        rules.check_options("trimmed-mean", {"trim": 0.5}, segments=4)
