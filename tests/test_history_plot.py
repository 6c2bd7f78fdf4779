"""A fit's history drawn for people: titles and axis labels in words, a legend for each line, the
segments' losses as a band, the drift ratio on its own panel; and the callback that redraws it
after every iteration (into a file here: in a notebook it updates the cell's figure)."""

from __future__ import annotations

import pytest
from tiny import dense_net, learnable_images

import gpcnn
from gpcnn.estimator import GreenplumCNN


def rows(drift: bool = True) -> list[dict]:
    made = []
    for i in range(1, 5):
        row = {"iteration": i, "epoch": float(i), "loss": 1.0 / i, "accuracy": 0.5 + 0.1 * i}
        row["per_segment"] = [{"key": k, "loss": 1.0 / i + 0.1 * k} for k in range(2)]
        if drift:
            row["drift_ratio"] = 0.5 + 0.01 * i
        if i % 2 == 0:
            row |= {"val_loss": 1.2 / i, "val_accuracy": 0.45 + 0.1 * i}
        made.append(row)
    return made


def test_the_history_figure_says_what_each_panel_line_and_band_is():
    fig = gpcnn.plot_history(rows())
    loss, accuracy, drift = fig.axes
    assert fig._suptitle.get_text() == "Fit: loss, accuracy and drift of the segments by epoch"
    assert [ax.get_title() for ax in fig.axes] == ["Loss", "Accuracy", "Drift ratio"]
    assert {ax.get_xlabel() for ax in fig.axes} == {"epoch (passes over the data)"}
    assert drift.get_ylabel() == "segments' spread / merged step"
    legend = [t.get_text() for t in loss.get_legend().get_texts()]
    assert legend == ["training", "validation", "segments' losses (lowest to highest)"]
    assert [list(line.get_xdata()) for line in accuracy.lines] == [[1, 2, 3, 4], [2, 4]]
    band = loss.collections[0].get_paths()[0].vertices
    assert band[:, 1].min() == pytest.approx(0.25) and band[:, 1].max() == pytest.approx(1.1)
    assert not any("_" in t for ax in fig.axes for t in (ax.get_title(), ax.get_ylabel()))


def test_a_fit_without_drift_gets_two_panels_and_an_empty_history_is_refused():
    assert len(gpcnn.plot_history(rows(drift=False)).axes) == 2
    with pytest.raises(ValueError, match="the history is empty"):
        gpcnn.plot_history([])


def test_the_live_plot_redraws_after_every_iteration_and_a_run_id_draws_the_same(db, tmp_path):
    x, y = learnable_images(40)
    est = GreenplumCNN(dense_net(), iterations=2, seed=1, database=db, verbose=0)
    path = tmp_path / "history.png"
    drawn = []

    class Counting(gpcnn.live_plot(est, path=path).__class__):
        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)
            drawn.append(path.stat().st_size)

    with est:
        est.fit(x, y, callbacks=[Counting()])
    assert len(drawn) == 2 and all(size > 0 for size in drawn)
    stored = gpcnn.plot_history(est.run_id_, db)
    assert stored._suptitle.get_text().startswith(f"Run {est.run_id_}: ")
    training_loss = stored.axes[0].lines[0]
    assert list(training_loss.get_ydata()) == [row["loss"] for row in est.history_]
