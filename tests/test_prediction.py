"""The study's predictions (gpcnn.fit.forecast.gap_law): the gap model recovers a known law, its interval
covers what the seeds' noise allows, and the early warning's numbers are the textbook ones."""

from __future__ import annotations

import random
import statistics

import pytest
import scipy.stats

from gpcnn.fit.forecast.gap_law import (
    GapPoints,
    fit_early_warning,
    fit_gap_model,
    fit_gap_models,
    gap_points,
    spearman,
)


def history(run, merge, segments, value, seed=0, merges=1.0, epoch=15.0, early=""):
    meta = {
        "run": run,
        "setting": run.rsplit("-s", 1)[0],
        "merge": merge,
        "segments": segments,
        "merges_per_epoch": merges,
        "seed": seed,
        "early_merges": early,
    }
    return [
        {**meta, "epoch": 1.0, "val_accuracy": 0.5},
        {**meta, "epoch": epoch, "val_accuracy": value},
    ]


def test_gaps_are_points_below_the_mean_of_the_one_worker_runs_per_rule_and_k():
    rows = [
        *history("single-s0", "single", 1, 0.91),
        *history("single-s1", "single", 1, 0.90, seed=1),
        *history("avg-k4-s0", "average", 4, 0.90),
        *history("avg-k4-s1", "average", 4, 0.89, seed=1),
        *history("avg-k8-s0", "average", 8, 0.88),
        *history("bmuf-k4-s0", "bmuf", 4, 0.91, merges=4.0),
    ]
    found = {(p.rule, p.merges_per_epoch): p.gaps for p in gap_points(rows, 15)}
    assert found[("average", 1.0)][4] == pytest.approx((0.5, 1.5))
    assert found[("average", 1.0)][8] == pytest.approx((2.5,))
    assert found[("bmuf", 4.0)][4] == pytest.approx((-0.5,))


def test_a_post_local_schedule_is_its_own_setting_not_the_rules_one_merge_per_epoch():
    rows = [
        *history("single-s0", "single", 1, 0.91),
        *history("avg-k8-s0", "average", 8, 0.90),
        *history("avg-k8-m8-8-1-s0", "average", 8, 0.80, early="8-8"),
    ]
    found = {(p.rule, p.merges_per_epoch, p.early_merges): p.gaps for p in gap_points(rows, 15)}
    assert found[("average", 1.0, "")][8] == pytest.approx((1.0,))
    assert found[("average", 1.0, "8-8")][8] == pytest.approx((11.0,))


def test_gap_points_refuse_rows_without_a_reference_at_that_epoch():
    with pytest.raises(ValueError, match="no 'single' run reaches epoch 15"):
        gap_points(history("avg-k4-s0", "average", 4, 0.9), 15)


def test_the_model_recovers_a_noiseless_power_law_and_predicts_it_exactly():
    gaps = {k: (0.3 * (k - 1) ** 0.8,) * 2 for k in (2, 4, 8)}
    model = fit_gap_model(GapPoints("average", 1.0, gaps), draws=50)
    assert (model.a, model.p) == pytest.approx((0.3, 0.8))
    prediction, low, high = model.predict(16)
    assert prediction == pytest.approx(0.3 * 15**0.8)
    assert low == pytest.approx(prediction) and high == pytest.approx(prediction)


def test_settings_sharing_the_exponent_keep_their_own_scales():
    gaps = {k: (0.3 * (k - 1) ** 0.8,) * 2 for k in (4, 8)}
    small = {k: (0.1 * (k - 1) ** 0.8,) * 2 for k in (4, 8)}
    models = fit_gap_models([GapPoints("average", 1.0, gaps), GapPoints("bmuf", 1.0, small)], 50)
    assert [m.a for m in models] == pytest.approx([0.3, 0.1])
    assert [m.p for m in models] == pytest.approx([0.8, 0.8])
    assert models[1].predict(16)[0] == pytest.approx(0.1 * 15**0.8)


def test_the_interval_covers_the_truth_about_as_often_as_it_says():
    rng = random.Random(1)
    truth = 0.25 * 15
    covered = 0
    for _ in range(40):
        gaps = {k: tuple(0.25 * (k - 1) + rng.gauss(0, 0.1) for _ in range(3)) for k in (2, 4, 8)}
        _, low, high = fit_gap_model(GapPoints("average", 1.0, gaps), draws=300).predict(16)
        measured = truth + statistics.fmean(rng.gauss(0, 0.1) for _ in range(2))
        covered += low <= measured <= high
    assert covered >= 30  # a 90 % interval; 40 trials


def test_one_value_of_k_is_not_enough_to_fit():
    with pytest.raises(ValueError, match="two values of K"):
        fit_gap_model(GapPoints("bmuf", 1.0, {4: (0.1, 0.2)}))


def test_spearman_equals_scipys_with_ties():
    xs, ys = [1.0, 2.0, 2.0, 5.0, 3.0], [0.3, 0.1, 0.2, 0.9, 0.9]
    assert spearman(xs, ys) == pytest.approx(scipy.stats.spearmanr(xs, ys).statistic)


def test_the_early_warning_of_runs_on_a_line_is_that_line_with_no_error():
    drift = [0.1, 0.2, 0.4, 0.8, 1.6]
    gap = [0.5 + 2.0 * d for d in drift]
    warning = fit_early_warning(drift, gap)
    assert (warning.intercept, warning.slope) == pytest.approx((0.5, 2.0))
    assert warning.rank_correlation == pytest.approx(1.0)
    assert warning.leave_one_out_error == pytest.approx(0.0, abs=1e-9)
    assert warning.expected_gap(1.0) == pytest.approx(2.5)


def test_the_early_warning_needs_four_runs():
    with pytest.raises(ValueError, match="4 runs or more"):
        fit_early_warning([0.1, 0.2, 0.3], [1.0, 2.0, 3.0])
