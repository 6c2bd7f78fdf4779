"""``gpcnn.forecast``: two pilots of 3 epochs (one worker on a one-segment copy, the setting on the
table), the law that scales their gap, reuse of stored pilots, and bad input refused before any
pilot runs."""

from __future__ import annotations

import logging
import re

import pytest
from tiny import dense_net, learnable_images, tiny_cnn

import gpcnn
from gpcnn.data.tables import TableError, describe, load_images
from gpcnn.fit.forecast import pilot_law
from gpcnn.tools import cli

SCHEMA = "gpcnn_forecast_test"
TRAIN, TEST = f"{SCHEMA}.train", f"{SCHEMA}.test"
PARAMS = dict(batch_size=16, learning_rate=0.05, threads_per_segment=1)


def pilots(db) -> list[dict]:
    """The runs of this module's tables."""
    return [r for r in gpcnn.list_runs(db) if r["table"].startswith(SCHEMA)]


@pytest.fixture(scope="module")
def tables(db):
    """The tables, with no pilot stored yet (a forecast reuses what an earlier run stored)."""
    gpcnn.delete_runs(db, [r["run_id"] for r in pilots(db)])
    gpcnn.drop_table(db, f"{TRAIN}_pilot_k1_s0", missing_ok=True)
    x, y = learnable_images(160)
    load_images(db, TRAIN, x[:120], y[:120], segments=2, replace=True, progress=False)
    load_images(db, TEST, x[120:], y[120:], segments=2, replace=True, progress=False)
    return TRAIN, TEST


def test_the_law_is_the_pilot_gap_scaled_by_the_studys_decay():
    assert pilot_law.ratio(3) == pytest.approx(1.025)
    assert pilot_law.ratio(15) < pilot_law.ratio(8) < 1  # the gap narrows as training goes on
    assert pilot_law.ratio(15, skew_max=0.9) > 2 * pilot_law.ratio(15)  # slower under skew
    found = pilot_law.gap_forecast(0.90, 0.86, 15, segments=8)
    assert found.pilot_gap == pytest.approx(4.0)
    assert found.gap == pytest.approx(4.0 * pilot_law.ratio(15))
    half = pilot_law.IID_WIDTH[0] + pilot_law.IID_WIDTH[1] * found.gap
    assert (found.low, found.high) == pytest.approx((found.gap - half, found.gap + half))
    assert pilot_law.gap_forecast(0.9, 0.88, 2, segments=4).gap == pytest.approx(2.0)


def test_a_forecast_runs_two_pilots_then_reuses_them(db, tables, capsys):
    train, test = tables
    before = len(pilots(db))
    found = gpcnn.forecast(db, train, tiny_cnn(), epochs=8, validation_table=test, **PARAMS)
    assert capsys.readouterr().out.startswith(
        f"Forecast of {train}: 2 pilot(s) of 3 epochs to train (2 segments, one worker): the "
        "bars show the time left once the first epoch ends\n"
    )
    made = pilots(db)[before:]
    assert [(r["table"].split(".")[-1], r["iterations"]) for r in made] == [
        ("train", 3),
        ("train_pilot_k1_s0", 3),
    ]
    assert describe(db, "gpcnn_forecast_test.train_pilot_k1_s0").segments == 1
    assert found.pilot_runs == tuple(r["run_id"] for r in made)
    assert found.segments == 2 and found.low < found.gap < found.high
    assert found.gap == pytest.approx(found.pilot_gap * pilot_law.ratio(8, found.skew_max))
    assert "outside what it was calibrated on" in found.rests_on
    again = gpcnn.forecast(db, train, tiny_cnn(), epochs=8, validation_table=test, **PARAMS)
    assert len(pilots(db)) == before + 2 and again.gap == pytest.approx(found.gap)
    assert again.pilot_runs == found.pilot_runs
    assert (
        capsys.readouterr().out
        == f"Forecast of {train}: both pilots are stored: nothing to train\n"
    )
    assert "points" in again.message()


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"validation_table": None}, ValueError, "give validation_table"),
        ({"epochs": 0}, ValueError, "an epoch of at least 1"),
        ({"segments": 10_000}, ValueError, "segments=10000: choose 1 to 120"),
        ({"merges_per_epoch": [2, 1]}, ValueError, "a schedule"),
        ({"merge": "mean"}, ValueError, "merge"),
        ({"iterations": 5}, ValueError, "the forecast sets it itself"),
        ({"validation_table": "gpcnn_forecast_test.nope"}, TableError, "nope"),
        ({"shared_sample": 0.7}, TableError, "0 < p <= 0.5"),
        ({"shared_sample": 0.05, "segments": 3}, ValueError, "keeps every row on its segment"),
    ],
)
def test_bad_input_is_refused_before_any_pilot(db, tables, change, error, message):
    train, test = tables
    before = len(pilots(db))
    arguments = {"epochs": 8, "validation_table": test, **PARAMS, **change}
    with pytest.raises(error, match=message):
        gpcnn.forecast(db, train, tiny_cnn(), **arguments)
    assert len(pilots(db)) == before


def test_a_pilot_of_another_model_is_not_reused_and_its_cost_is_told_from_the_tables_runs(
    db, tables, capsys
):
    train, test = tables
    before = len(pilots(db))
    other = dense_net()  # the same parameters, another model
    gpcnn.forecast(db, train, other, epochs=8, validation_table=test, **PARAMS)
    assert len(pilots(db)) == before + 2
    said = capsys.readouterr().out.splitlines()[0]
    assert said.endswith("under a minute, as fits of these tables took"), said


def test_the_command_line_prints_the_forecast(db, tables, capsys):
    train, test = tables
    base = ["--database", db.url.render_as_string(hide_password=False), "--schema", db.schema]
    gpcnn.store_model(db, "forecast-tiny", tiny_cnn(), replace=True)
    arguments = ["--table", train, "--validation-table", test, "--model", "forecast-tiny"]
    assert cli.main(["forecast", *arguments, "--epochs", "6", "--batch-size", "16", *base]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("forecast")]
    assert line.startswith(f"forecast for {train}: at epoch 6 with 2 segments: about ")


def test_a_plan_forecasts_each_setting_and_picks_the_cheapest_within_tolerance(db, tables):
    train, test = tables
    made = gpcnn.plan(db, train, tiny_cnn(), epochs=8, validation_table=test, **PARAMS)
    assert [(c.merge, c.merges_per_epoch) for c in made.candidates] == [
        ("average", 1),
        ("bmuf", 1),
        ("bmuf", 4),
    ]
    assert all(c.meets == (c.forecast.high <= 1.0) for c in made.candidates)
    meeting = [c for c in made.candidates if c.meets]
    if meeting:
        cheapest = min(c.forecast.seconds_per_epoch for c in meeting)
        assert made.chosen.forecast.seconds_per_epoch == cheapest
        assert made.text().endswith(f"cheapest within 1 points: {made.chosen.words()}")
    else:
        assert made.chosen is None and "no setting gpcnn knows" in made.text()
    strict = gpcnn.plan(
        db, train, tiny_cnn(), epochs=8, validation_table=test, tolerance=-100, **PARAMS
    )
    assert strict.chosen is None and "no setting gpcnn knows stays within -100" in strict.text()
    with pytest.raises(ValueError, match="merge: the plan chooses it"):
        gpcnn.plan(db, train, tiny_cnn(), epochs=8, validation_table=test, merge="bmuf")


def test_a_fit_after_a_forecast_warns_against_its_one_worker_pilot(db, tables, caplog):
    train, test = tables
    gpcnn.forecast(db, train, tiny_cnn(), epochs=8, validation_table=test, **PARAMS)  # stored
    est = gpcnn.GreenplumCNN(
        tiny_cnn(), database=db, validation_table=test, seed=0, iterations=4, verbose=0, **PARAMS
    )
    with caplog.at_level(logging.INFO, logger="gpcnn"):
        est.fit(train)
    said = [r.getMessage() for r in caplog.records if "one-worker pilot" in r.getMessage()]
    (line,) = said
    found = re.search(r"the one-worker pilot \(run (\d+)\) at epoch 3", line)
    assert found is not None and "at epoch 4 (90 % interval" in line
    (single,) = [r for r in pilots(db) if r["run_id"] == int(found.group(1))]
    assert single["table"] == f"{train}_pilot_k1_s0" and single["iterations"] == 3
    elsewhere = gpcnn.GreenplumCNN(tiny_cnn(), database=db, validation_table=test, seed=1, **PARAMS)
    with caplog.at_level(logging.INFO, logger="gpcnn"):
        elsewhere.set_params(iterations=3, verbose=0).fit(train)  # no pilot of seed 1
    assert sum("one-worker pilot" in r.getMessage() for r in caplog.records) == 1


def test_on_a_skewed_table_the_plan_also_forecasts_re_dealing_and_a_shared_sample(db, tables):
    _, test = tables
    x, y = learnable_images(120)
    skewed = f"{SCHEMA}.skewed"
    load_images(
        db,
        skewed,
        x,
        y,
        segments=2,
        distribution="label-skew",
        skew=0.1,
        replace=True,
        progress=False,
    )
    assert describe(db, skewed).label_skew.max >= pilot_law.SKEWED
    made = gpcnn.plan(db, skewed, tiny_cnn(), epochs=6, validation_table=test, **PARAMS)
    assert [c.words() for c in made.candidates][3:] == [
        "average, 1 merge(s) per epoch, table re-dealt IID",
        "bmuf, 1 merge(s) per epoch, table re-dealt IID",
        "bmuf, 4 merge(s) per epoch, table re-dealt IID",
        "average, 1 merge(s) per epoch, shared sample 5 %",
        "bmuf, 4 merge(s) per epoch, shared sample 5 %",
    ]
    shared = describe(db, f"{skewed}_pilot_k2_shared5_s0")
    assert shared.segments == 2 and shared.shared_images == 6  # 5 % of 120
    assert "shared sample of 5 %" in made.candidates[-1].forecast.rests_on
