"""The early warning: the gap to one worker a fit's first three epochs point to,
logged once by the fit when epoch 3 ends, printed by ``gpcnn runs show``, and computed by
``gpcnn.forecast_gap`` from any history."""

from __future__ import annotations

import logging

import pytest
from tiny import learnable_images, tiny_cnn

import gpcnn
from gpcnn.fit import runs
from gpcnn.fit.forecast import early_warning
from gpcnn.fit.progress import EarlyWarning
from gpcnn.tools.commands import _run_text


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
    callback = EarlyWarning(7, history, verbose=2)
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
        EarlyWarning(1, history).on_epoch_end(2)
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
    said = [r.getMessage() for r in caplog.records if "on course to end" in r.getMessage()]
    assert said == [f"run {est.run_id_}: {found.message()}"]
    assert f"early warning: {found.message()}" in _run_text(runs.show_run(db, est.run_id_))


def test_on_a_label_skewed_table_the_early_warning_gives_no_number(caplog):
    history = rows((1, 0.9), (2, 1.0), (3, 1.1))
    with caplog.at_level(logging.INFO, logger="gpcnn"):
        EarlyWarning(1, history, skew_max=0.79).on_epoch_end(2)
    [record] = caplog.records
    said = record.getMessage()
    assert "labels are skewed (index 0.79)" in said and "no number" in said
    assert "points" not in said
