"""Every iteration's diagnostics: each segment's images, loss, accuracy, seconds
and step, and the spread, merged step and drift ratio, on every merge path and both dispatches,
against a reference computed in plain numpy from the segments' own trained vectors."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import sqlalchemy as sa
from tiny import learnable_images, tiny_cnn

from gpcnn.data.tables import load_images
from gpcnn.engines.catalog import Catalog
from gpcnn.engines.results import SegmentReport, merged_step2
from gpcnn.engines.streaming import StreamingAverage
from gpcnn.estimator import GreenplumCNN
from gpcnn.fit import runs
from gpcnn.fit.diagnostics import Diagnostics, cancellation_bound, flat_row
from gpcnn.kernel import averaging, states, wire
from gpcnn.tools.commands import _run_text

pytestmark = pytest.mark.every_dispatch

DATA_SCHEMA = "gpcnn_diagnostics_test"
TIGHT = 1e-12  # float64 sums added in another order


def estimator(db, schema, model, **params):
    defaults = dict(
        optimizer="sgd",
        learning_rate=0.05,
        batch_size=16,
        iterations=1,
        seed=11,
        database=db,
        threads_per_segment=1,
        verbose=0,
    )
    return GreenplumCNN(model, **{**defaults, **params})


@pytest.fixture(scope="module")
def tables(db, schema):
    x, y = learnable_images(150)
    names = {}
    for k in (2, 3):
        names[k] = f"{DATA_SCHEMA}.train_k{k}"
        load_images(db, names[k], x, y, segments=k, buffer_size=20, replace=True, progress=False)
    return names


def reference(start: np.ndarray, models: dict[int, np.ndarray], counts: dict[int, int]) -> dict:
    """Steps, spread and merged step in plain float64 numpy; the average as the merge makes it."""
    n = sum(counts.values())
    exact = sum(models[k].astype(np.float64) * counts[k] for k in models) / n
    average = exact.astype(np.float32)

    def sq(a, b):
        return float(np.sum((a.astype(np.float64) - b.astype(np.float64)) ** 2))

    return {
        "average": average,
        "steps": {k: math.sqrt(sq(models[k], start)) for k in models},
        "spread2": sum(counts[k] * sq(models[k], average) for k in models) / n,
        "merged_step2": sq(average, start),
    }


@pytest.mark.parametrize("k", [2, 3])
def test_each_merge_paths_diagnostics_equal_the_reference_from_the_segments_vectors(
    db, schema, tables, k
):
    """``average`` merges in the database (one statement) or here as the streams arrive (a
    session per segment) and measures the spread from the segments' steps; ``none`` returns each
    segment's vector and measures it directly. Iteration 1 trains the same K vectors either way:
    both agree with numpy's reference from those vectors, the in-database spread^2 within the
    stated cancellation bound."""
    model = tiny_cnn()
    start = wire.flatten(model.get_weights())
    fits = {}
    for merge in ("average", "none"):
        with estimator(db, schema, model, merge=merge) as est:
            est.fit(tables[k])
        fits[merge] = est
    with db.connect() as conn:
        models = {
            key: s.weights
            for key, s in Catalog(conn, db.backend).segment_starts(fits["none"].run_id_).items()
        }
    merged, direct = fits["average"].history_[0], fits["none"].history_[0]
    counts = {s["key"]: s["images"] for s in direct["per_segment"]}
    ref = reference(start, models, counts)
    np.testing.assert_array_equal(
        wire.flatten(fits["average"].model_.get_weights()), ref["average"]
    )
    assert [s["key"] for s in merged["per_segment"]] == [s["key"] for s in direct["per_segment"]]
    assert [s["shard"] for s in direct["per_segment"]] == list(range(k))
    for a, b in zip(merged["per_segment"], direct["per_segment"], strict=True):
        untimed = {name: v for name, v in a.items() if name != "seconds"}
        assert untimed == {name: v for name, v in b.items() if name != "seconds"}
        assert a["seconds"] > 0 and b["seconds"] > 0
        assert b["step"] == pytest.approx(ref["steps"][b["key"]], rel=TIGHT)
    losses = sum(s["loss"] * s["images"] for s in direct["per_segment"]) / sum(counts.values())
    assert losses == pytest.approx(direct["loss"], rel=TIGHT)
    assert direct["spread"] ** 2 == pytest.approx(ref["spread2"], rel=TIGHT)
    for row in (merged, direct):
        assert row["merged_step"] ** 2 == pytest.approx(ref["merged_step2"], rel=TIGHT)
        assert row["drift_ratio"] == row["spread"] / row["merged_step"]
    bound = cancellation_bound(ref["merged_step2"], ref["average"]) + TIGHT * ref["spread2"]
    assert abs(merged["spread"] ** 2 - ref["spread2"]) <= bound
    assert ref["spread2"] > 100 * bound  # the bound is tight enough to say something here


def test_the_diagnostics_are_stored_and_read_back_by_the_views_and_runs_show(db, schema, tables):
    """The stored rows keep the diagnostics; ``run_diagnostics`` has one typed row per iteration
    and ``run_segment_diagnostics`` one per iteration and segment; ``gpcnn runs show`` prints a
    line per segment; Keras callbacks get each segment's numbers flat."""
    seen = []

    class Logs(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append(dict(logs))

    with estimator(db, schema, tiny_cnn(), iterations=2) as est:
        est.fit(tables[3], callbacks=[Logs()])
    history, run_id = est.history_, est.run_id_
    shown = runs.show_run(db, run_id)
    assert shown["history"] == history
    with db.connect() as conn:
        iterations = conn.execute(
            sa.text(
                f"SELECT iteration, images, loss, spread, merged_step, drift_ratio "
                f"FROM {schema}.run_diagnostics WHERE run_id = :r ORDER BY iteration"
            ),
            {"r": run_id},
        ).all()
        segments = conn.execute(
            sa.text(
                f"SELECT iteration, segment_key, shard, images, loss, accuracy, seconds, step "
                f"FROM {schema}.run_segment_diagnostics WHERE run_id = :r "
                "ORDER BY iteration, shard"
            ),
            {"r": run_id},
        ).all()
    names = ("iteration", "images", "loss", "spread", "merged_step", "drift_ratio")
    assert [tuple(r) for r in iterations] == [tuple(row[n] for n in names) for row in history]
    names = ("key", "shard", "images", "loss", "accuracy", "seconds", "step")
    assert [tuple(r) for r in segments] == [
        (row["iteration"], *(s[n] for n in names)) for row in history for s in row["per_segment"]
    ]
    assert isinstance(segments[0].images, int) and isinstance(segments[0].step, float)
    text = _run_text(shown)
    assert text.count("segment ") == 6 and text.count("spread ") == 2
    for logs, row in zip(seen, history, strict=True):
        assert logs["drift_ratio"] == row["drift_ratio"]
        for s in row["per_segment"]:
            assert logs[f"loss_segment_{s['key']}"] == s["loss"]
            assert logs[f"step_segment_{s['key']}"] == s["step"]


# -- without the database ------------------------------------------------------------------------


def reports(steps2: dict[int, float], counts: dict[int, int]) -> list[SegmentReport]:
    return [
        SegmentReport(key, shard, counts[key], {"loss": 1.0}, 0.1, steps2[key])
        for shard, key in enumerate(steps2)
    ]


@pytest.mark.parametrize("drift", [1e-1, 1e-3])
def test_the_spread_from_the_steps_is_within_its_bound_of_the_direct_one(drift):
    """The in-database formula (mean squared step minus the merged step squared) against the
    direct spread around the float32 average, for segments that drift apart much or little."""
    rng = np.random.default_rng(5)
    start = rng.normal(0, 1, 5000).astype(np.float32)
    step = rng.normal(0, 0.01, 5000)
    models = {
        key: (start + step + rng.normal(0, drift * 0.01, 5000)).astype(np.float32)
        for key in (4, 0, 7)
    }
    counts = {4: 30, 0: 50, 7: 21}
    average = averaging.weighted_average([models[k] for k in models], [counts[k] for k in models])
    steps2 = {k: averaging.squared_distance(models[k], start) for k in models}
    starts = dict.fromkeys(models, start)
    direct = Diagnostics.from_vectors(reports(steps2, counts), starts, models, average)
    merged2 = averaging.squared_distance(average, start)
    via_steps = Diagnostics.from_steps(reports(steps2, counts), merged2)
    assert via_steps.merged_step2 == direct.merged_step2
    bound = cancellation_bound(merged2, average) + TIGHT * direct.spread2
    assert abs(via_steps.spread2 - direct.spread2) <= bound
    assert 0.5 * drift < direct.drift_ratio < drift  # the spread about the mean of three


def test_one_segment_has_no_spread_and_the_formula_never_goes_below_zero():
    start = np.zeros(10, np.float32)
    model = np.full(10, 0.1, np.float32)
    steps2 = {0: averaging.squared_distance(model, start)}
    merged2 = steps2[0] * (1 + 1e-15)  # rounding may put the merged step above the mean step
    diagnostics = Diagnostics.from_steps(reports(steps2, {0: 8}), merged2)
    assert diagnostics.spread == 0.0 and diagnostics.drift_ratio == 0.0
    assert Diagnostics.from_steps(reports(steps2, {0: 8}), 0.0).drift_ratio is None  # no step
    row = Diagnostics.from_steps(reports(steps2, {0: 8}), None).row()
    assert "spread" not in row and row["per_segment"][0]["step"] == math.sqrt(steps2[0])


@pytest.mark.parametrize("chunk_values", [3, 7, 1000])
def test_the_merged_step_sums_alike_streamed_here_or_merged_in_the_database(chunk_values):
    """The client's streaming merge measures the merged step block by block as it writes the
    average (into the start's own buffer, here), the database's merge after the chunks arrive:
    the same float64 sum, bit for bit, whatever the chunk size."""
    rng = np.random.default_rng(2)
    vectors = [rng.normal(0, 1, 40).astype(np.float32) for _ in range(2)]
    start = rng.normal(0, 1, 30).astype(np.float32)  # the weights: the vector's first 30 values
    into = np.concatenate([start, np.zeros(10, np.float32)])
    merger = StreamingAverage([0, 1], chunk_values, paced=False, into=into, reference=into[:30])
    try:
        for key, vector in enumerate(vectors):
            state = states.encode_state({"count": 5 + key, "sums": {"loss": 1.0}, "values": 40})
            merger.add((key, -1, 5 + key, state))
            for chunk, offset in enumerate(range(0, 40, chunk_values)):
                merger.add((key, chunk, 5 + key, vector[offset : offset + chunk_values].tobytes()))
    finally:
        merger.close()
    streamed = merger.result()
    chunks = {
        chunk: streamed.vector[offset : offset + chunk_values].tobytes()
        for chunk, offset in enumerate(range(0, 40, chunk_values))
    }
    assert streamed.merged_step2 == merged_step2(streamed.vector, start, chunks)
    assert streamed.merged_step2 == pytest.approx(
        float(np.sum((streamed.vector[:30].astype(np.float64) - start) ** 2)), rel=TIGHT
    )


def test_the_diagnostics_figure_plots_the_drift_ratio_and_each_segments_loss():
    """From history rows as a fit stores them (``per_segment``) or flat, as the study's CSV has
    them: one drift-ratio curve per setting, one loss line per segment."""
    from gpcnn.study.plots import diagnostics_figure

    def row(epoch, ratio):
        segments = [
            {"key": k, "shard": k, "images": 10, "loss": epoch + k, "step": 0.1} for k in (0, 1)
        ]
        return {
            "iteration": epoch,
            "epoch": float(epoch),
            "drift_ratio": ratio,
            "per_segment": segments,
        }

    nested = [row(1, 0.5), row(2, 0.25)]
    fig = diagnostics_figure({"a": [nested], "b": [[flat_row(r) for r in nested]]})
    drift, losses = fig.axes
    assert [list(line.get_ydata()) for line in drift.lines] == [[0.5, 0.25], [0.5, 0.25]]
    assert sorted(line.get_gid() for line in losses.lines) == [
        "a/loss_segment_0",
        "a/loss_segment_1",
        "b/loss_segment_0",
        "b/loss_segment_1",
    ]
    assert list(losses.lines[1].get_ydata()) == [2.0, 3.0]
