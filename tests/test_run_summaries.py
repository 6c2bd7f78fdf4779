"""What a user sees of stored runs, like MADlib's summary tables: ``gpcnn runs list`` with each
run's epochs and its last and best validation accuracy and loss, ``gpcnn runs show`` with the
history of every iteration."""

from __future__ import annotations

import pytest
from tiny import dense_net, learnable_images

import gpcnn
from gpcnn.data.tables import load_images
from gpcnn.estimator import GreenplumCNN
from gpcnn.tools import cli

DATA = "gpcnn_summaries_test"


@pytest.fixture(scope="module")
def fitted(db):
    x, y = learnable_images(60, seed=8)
    load_images(db, f"{DATA}.train", x, y, segments=2, buffer_size=15, replace=True, progress=False)
    load_images(db, f"{DATA}.test", x[:30], y[:30], segments=2, replace=True, progress=False)
    est = GreenplumCNN(
        dense_net(),
        iterations=3,
        learning_rate=0.05,
        batch_size=8,
        seed=1,
        database=db,
        validation_table=f"{DATA}.test",
        threads_per_segment=1,
        verbose=0,
    )
    return est.fit(f"{DATA}.train")


def test_list_runs_gives_epochs_and_the_last_and_best_validation_values(db, fitted):
    (row,) = gpcnn.list_runs(db, [fitted.run_id_])
    history = fitted.history_
    assert row["epochs"] == history[-1]["epoch"] == 3
    assert row["val_accuracy"] == history[-1]["val_accuracy"]
    assert row["best_val_accuracy"] == max(h["val_accuracy"] for h in history)
    assert row["val_loss"] == history[-1]["val_loss"]
    assert row["best_val_loss"] == min(h["val_loss"] for h in history)
    assert row["loss"] == history[-1]["loss"]


def test_the_command_line_lists_runs_with_those_columns_and_shows_the_history(db, fitted, capsys):
    base = ["--database", db.url.render_as_string(hide_password=False), "--schema", db.schema]
    assert cli.main(["runs", "list", *base]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[:10] == [
        "run",
        "status",
        "merge",
        "iterations",
        "epochs",
        "loss",
        "val_acc",
        "best_acc",
        "val_loss",
        "best_loss",
    ]
    (line,) = [ln for ln in lines if ln.split()[0] == str(fitted.run_id_)]
    last = fitted.history_[-1]
    assert f"{last['val_accuracy']:.4f}" in line and f"{last['val_loss']:.4f}" in line
    assert line.split()[3:6] == ["3", "3.00", f"{last['loss']:.4f}"]

    assert cli.main(["runs", "show", str(fitted.run_id_), *base]) == 0
    summary, columns, *rows, warning = capsys.readouterr().out.splitlines()
    assert summary.startswith(f"run {fitted.run_id_}: finished, {DATA}.train, merge=average")
    drift = gpcnn.forecast_gap(fitted.history_)  # a tiny model: the drift ratio, no number
    assert warning.startswith(f"early warning: drift ratio {drift.drift_ratio:.2f} over epochs 1-3")
    assert warning.endswith("no number for this model (gpcnn.forecast pilots it)")
    assert columns.split() == [
        "iteration",
        "epoch",
        "loss",
        "accuracy",
        "val_loss",
        "val_accuracy",
        "seconds",
        "drift_ratio",
    ]
    diagnostics = [r for r in rows if r.split()[0] in ("spread", "segment")]
    rows = [r for r in rows if r not in diagnostics]
    assert [int(r.split()[0]) for r in rows] == [1, 2, 3]
    assert f"{fitted.history_[1]['val_loss']:.4f}" in rows[1]
    assert f"{fitted.history_[1]['drift_ratio']:.4f}" in rows[1]
    segments = len(fitted.history_[0]["per_segment"])
    assert len(diagnostics) == 3 * (1 + segments)  # each iteration's spread, then its segments
