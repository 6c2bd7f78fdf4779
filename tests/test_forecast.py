"""The early warning: the gap to one worker a fit's first three epochs point to, logged once by
the fit when epoch 3 ends, printed by ``gpcnn runs show``, and computed by ``gpcnn.forecast_gap``
from any history; against a stored one-worker pilot where there is one, no number outside what
the drift line was fitted on."""

from __future__ import annotations

import logging

import pytest
from tiny import learnable_images, tiny_cnn

import gpcnn
from gpcnn.fit import runs
from gpcnn.fit.forecast import early_warning, pilot_law
from gpcnn.fit.forecast.early_warning import EarlyBasis, early_message
from gpcnn.fit.forecast.pilots import stored_basis
from gpcnn.fit.progress import EarlyWarning
from gpcnn.tools.commands import _run_text

IID = EarlyBasis(reference=None, calibrated=True, final_epoch=15, segments=4)


def rows(*pairs: tuple[float, float | None]) -> list[dict]:
    return [
        {"iteration": i, "epoch": epoch, "drift_ratio": ratio}
        for i, (epoch, ratio) in enumerate(pairs, 1)
    ]


def test_the_forecast_is_the_studys_line_at_the_mean_drift_ratio_of_epochs_1_to_3():
    found = gpcnn.forecast_gap(rows((1, 0.5), (2, 0.6), (3, 0.7), (4, 2.0)))
    assert found.drift_ratio == pytest.approx(0.6)
    assert found.gap == pytest.approx(early_warning.INTERCEPT + early_warning.SLOPE * 0.6)
    assert f"{found.gap:.1f} points below one worker" in found.message()
    assert f"± {early_warning.ERROR:.1f}" in found.message()


def test_four_merges_per_epoch_average_every_iteration_of_the_first_three_epochs():
    quarters = rows(*((0.25 * i, 0.1 * i) for i in range(1, 13)))
    assert gpcnn.forecast_gap(quarters).drift_ratio == pytest.approx(0.65)


def test_there_is_no_forecast_before_epoch_3_ends_or_without_a_drift_ratio():
    assert gpcnn.forecast_gap([]) is None
    assert gpcnn.forecast_gap(rows((1, 0.5), (2, 0.6))) is None
    assert gpcnn.forecast_gap(rows((1, 0.5), (2, None), (3, 0.7))) is None  # one segment, hopper


def test_the_callback_speaks_once_at_the_iteration_that_ends_epoch_3(caplog, capsys):
    history: list[dict] = []
    callback = EarlyWarning(7, history, 2, IID)
    with caplog.at_level(logging.INFO, logger="gpcnn"):
        for row in rows((1, 0.9), (2, 1.0), (3, 1.1), (4, 1.2)):
            history.append(row)
            callback.on_epoch_end(row["iteration"] - 1)
    [record] = caplog.records
    message = gpcnn.forecast_gap(history[:3]).message()
    assert record.levelno == logging.INFO and record.getMessage() == f"run 7: {message}"
    assert capsys.readouterr().out == f"Early warning: {message}\n"  # verbose=2 prints it


def test_a_forecast_above_one_worker_says_above_and_prints_nothing_unless_verbose_2(caplog, capsys):
    history = rows((1, 0.2), (2, 0.3), (3, 0.4))
    with caplog.at_level(logging.INFO, logger="gpcnn"):
        EarlyWarning(1, history, 0, IID).on_epoch_end(2)
    [record] = caplog.records
    assert "on course to end about 0.9 points above one worker" in record.getMessage()
    assert capsys.readouterr().out == ""


@pytest.mark.every_dispatch
def test_a_fit_logs_the_forecast_of_its_history_and_runs_show_prints_it(db, caplog):
    x, y = learnable_images(120)
    table = "gpcnn_forecast_test.train"
    gpcnn.load_images(db, table, x, y, segments=3, buffer_size=20, replace=True, progress=False)
    est = gpcnn.GreenplumCNN(
        tiny_cnn(),
        optimizer="sgd",
        learning_rate=0.05,
        batch_size=16,
        iterations=4,
        seed=3,
        database=db,
        threads_per_segment=1,
        verbose=0,
    )
    with caplog.at_level(logging.INFO, logger="gpcnn"):
        est.fit(table)
    found = gpcnn.forecast_gap(est.history_)
    assert found is not None and found.drift_ratio > 0
    said = [r.getMessage() for r in caplog.records if "drift ratio" in r.getMessage()]
    basis = EarlyBasis(None, calibrated=False, final_epoch=4, segments=3)
    expected = early_message(est.history_, basis)
    assert said == [f"run {est.run_id_}: {expected}"] and "no number for this model" in expected
    shown = runs.show_run(db, est.run_id_)
    assert f"early warning: {expected}" in _run_text(shown, stored_basis(db, shown))


def test_on_a_label_skewed_table_the_early_warning_gives_no_number(caplog):
    history = rows((1, 0.9), (2, 1.0), (3, 1.1))
    with caplog.at_level(logging.INFO, logger="gpcnn"):
        EarlyWarning(1, history, 0, EarlyBasis(None, True, 15, 4, skew_max=0.79)).on_epoch_end(2)
    [record] = caplog.records
    said = record.getMessage()
    assert "labels are skewed (index 0.79)" in said and "no number" in said
    assert "points" not in said


def test_outside_the_model_it_was_fitted_on_the_drift_line_gives_no_number():
    history = rows((1, 0.9), (2, 1.0), (3, 1.1))
    said = early_message(history, EarlyBasis(None, calibrated=False, final_epoch=15, segments=4))
    assert said is not None and "fitted on bn_cnn alone: no number" in said
    assert "points" not in said


def test_against_a_stored_one_worker_pilot_the_warning_is_the_forecasts_law_even_under_skew():
    history = [{**row, "val_accuracy": 0.80} for row in rows((1, 0.9), (2, 1.0), (3, 1.1))]
    basis = EarlyBasis((12, 0.85), calibrated=False, final_epoch=8, segments=6, skew_max=0.79)
    law = pilot_law.gap_forecast(0.85, 0.80, 8, segments=6, skew_max=0.79)
    said = early_message(history, basis)
    assert said is not None and said.startswith("5.0 points below the one-worker pilot (run 12)")
    assert f"about {law.gap:.1f} points below one worker's validation accuracy at epoch 8" in said
    assert f"(90 % interval {law.low:.1f} to {law.high:.1f};" in said


def test_the_calibrated_layers_are_bn_cnns_at_any_image_shape_and_no_other_models():
    from gpcnn import models

    for shape, classes in (((28, 28, 1), 10), ((32, 32, 3), 4)):
        built = models.bn_cnn(shape, classes)
        assert early_warning.layer_signature(built.to_json()) == early_warning.CALIBRATED_LAYERS
    for other in (models.gn_cnn, models.small_cnn, models.fedavg_cnn):
        signature = early_warning.layer_signature(other((28, 28, 1), 10).to_json())
        assert signature != early_warning.CALIBRATED_LAYERS
