"""GreenplumCNN as Keras and scikit-learn users expect it: callbacks, learning rates across
merges, iterations as the total, partial_fit, validation_freq, verbose, arrays, the scikit-learn
contract (cross_val_score, GridSearchCV), pickling, logging and the command line's errors."""

from __future__ import annotations

import gc
import logging
import pickle

import numpy as np
import pytest
from sklearn.base import clone, is_classifier
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, cross_val_score
from tiny import learnable_images, tiny_cnn

from gpcnn.data import staging
from gpcnn.data.tables import list_tables, load_images
from gpcnn.estimator import GreenplumCNN
from gpcnn.fit import runs
from gpcnn.kernel import keras_setup, wire
from gpcnn.tools import cli

keras = keras_setup.keras_module()
DATA = "gpcnn_estimator_test"


@pytest.fixture(scope="module")
def data():
    return learnable_images(120)


@pytest.fixture(scope="module")
def table(db, data):
    x, y = data
    load_images(db, f"{DATA}.train", x, y, segments=2, buffer_size=20, replace=True, progress=False)
    load_images(db, f"{DATA}.test", x[:40], y[:40], segments=2, replace=True, progress=False)
    return f"{DATA}.train"


def make(db, **params):
    defaults = dict(
        learning_rate=0.05,
        batch_size=16,
        iterations=2,
        seed=11,
        database=db,
        threads_per_segment=1,
        verbose=0,
    )
    return GreenplumCNN(tiny_cnn(), **{**defaults, **params})


def flat(est) -> np.ndarray:
    return wire.flatten(est.model_.get_weights())


# -- callbacks ------------------------------------------------------------------------------------


def test_early_stopping_stops_the_run_which_is_stored_as_stopped_early(db, table):
    stop = keras.callbacks.EarlyStopping(monitor="loss", min_delta=10.0, patience=0)
    est = make(db, iterations=6).fit(table, callbacks=[stop])
    assert len(est.history_) == 2  # iteration 2 did not improve by 10: stop
    assert runs.load_run(db, est.run_id_).status == "stopped_early"
    assert runs.find_unfinished(db, table, est.stored_params()) != est.run_id_  # not resumed


def test_model_checkpoint_csv_logger_and_tensorboard_work_unchanged(db, table, tmp_path):
    checkpoint = keras.callbacks.ModelCheckpoint(str(tmp_path / "it{epoch}.keras"))
    logger = keras.callbacks.CSVLogger(str(tmp_path / "history.csv"))
    board = keras.callbacks.TensorBoard(log_dir=str(tmp_path / "tb"), histogram_freq=0)
    est = make(db, iterations=2).fit(table, callbacks=[checkpoint, logger, board])
    saved = keras.saving.load_model(tmp_path / "it2.keras", compile=False)
    np.testing.assert_array_equal(wire.flatten(saved.get_weights()), flat(est))
    assert (tmp_path / "it1.keras").exists()
    lines = (tmp_path / "history.csv").read_text().splitlines()
    assert len(lines) == 3 and "loss" in lines[0].split(",")
    # after gpcnn has set TensorFlow up (tensorboard imports it)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    (train_events,) = (tmp_path / "tb" / "train").glob("events.out.tfevents.*")
    events = EventAccumulator(str(train_events), size_guidance={"tensors": 0}).Reload()
    logged = [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors("epoch_loss")]
    assert logged == [(i, pytest.approx(row["loss"])) for i, row in enumerate(est.history_)]


def test_callbacks_that_act_per_batch_are_refused_before_any_work(db, table):
    per_batch = [
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.LambdaCallback(on_batch_end=lambda batch, logs: None),
        keras.callbacks.ModelCheckpoint("/tmp/never.keras", save_freq=5),
    ]
    before = len(runs.list_runs(db))
    for callback in per_batch:
        with pytest.raises(ValueError, match="acts per batch"):
            make(db).fit(table, callbacks=[callback])
    assert len(runs.list_runs(db)) == before  # refused before a run was created


def test_learning_rate_scheduler_sets_the_rate_the_segments_use(db, table):
    frozen = keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.0 if epoch >= 1 else lr)
    one = make(db, iterations=1).fit(table)
    two = make(db, iterations=3).fit(table, callbacks=[frozen])
    np.testing.assert_array_equal(flat(two), flat(one))  # rate 0 from iteration 2 on: no change


def test_reduce_lr_on_plateau_lowers_the_rate_for_the_next_iterations(db, table):
    plateau = keras.callbacks.ReduceLROnPlateau(
        monitor="loss", factor=0.5, patience=0, min_delta=10.0, verbose=0
    )
    est = make(db, iterations=3).fit(table, callbacks=[plateau])
    rate = float(keras.ops.convert_to_numpy(est.model_.optimizer.learning_rate))
    assert rate == pytest.approx(0.05 * 0.5**2)  # reduced after iterations 2 and 3's start
    assert len(est.history_) == 3


# -- the loop -------------------------------------------------------------------------------------


def test_iterations_is_the_total_and_partial_fit_adds_one(db, table):
    est = make(db, iterations=2).fit(table)
    est.set_params(iterations=3, warm_start=True)
    est.fit(table)
    assert [r["iteration"] for r in est.history_] == [1, 2, 3]  # one more, to the total of 3
    est.fit(table)
    assert len(est.history_) == 3  # already there: nothing more to train
    grown = make(db)
    grown.partial_fit(table)
    first_run = grown.run_id_
    grown.partial_fit(table)
    assert [r["iteration"] for r in grown.history_] == [1, 2] and grown.run_id_ == first_run
    whole = make(db, iterations=2).fit(table)
    np.testing.assert_allclose(flat(grown), flat(whole), atol=1e-6, rtol=0)


def test_validation_freq_and_validation_data_in_fit(db, table, data):
    x, y = data
    est = make(db, iterations=4, validation_table=f"{DATA}.test", validation_freq=2)
    est.fit(table)
    assert ["val_loss" in r for r in est.history_] == [False, True, False, True]
    est = make(db, iterations=2, validation_freq=[1]).fit(table, validation_data=(x[:30], y[:30]))
    assert ["val_accuracy" in r for r in est.history_] == [True, False]
    with pytest.raises(ValueError, match="validation_freq must be"):
        make(db, validation_freq=0).fit(table)


def test_verbose_2_prints_a_line_per_iteration_and_logging_records_each(db, table, capsys, caplog):
    with caplog.at_level(logging.INFO, logger="gpcnn"):
        make(db, iterations=2, verbose=2).fit(table)
    out = capsys.readouterr().out
    assert "Iteration 1/2" in out and "Iteration 2/2" in out
    assert [r.message for r in caplog.records if "iteration 2/2" in r.message]
    with pytest.raises(ValueError, match="verbose must be 0, 1 or 2"):
        make(db, verbose=3).fit(table)


# -- scikit-learn ---------------------------------------------------------------------------------


def test_the_scikit_learn_contract(db, table, data):
    x, y = data
    est = make(db)
    assert is_classifier(est)
    with pytest.raises(NotFittedError):
        est.predict(table)
    est.fit(table)
    in_db = est.score(f"{DATA}.test")
    assert in_db == pytest.approx(float(np.mean(est.predict(x[:40]) == y[:40])))
    weights = (np.arange(40) < 20).astype(float)
    assert est.score(x[:40], y[:40], sample_weight=weights) == pytest.approx(
        float(np.mean(est.predict(x[:20]) == y[:20]))
    )
    with pytest.raises(ValueError, match="takes no y or sample_weight"):
        est.score(f"{DATA}.test", sample_weight=weights)
    routed = clone(est).set_params(merge="bmuf", merge__eta=0.5, merge__nesterov=False)
    assert routed.merge_options == {"eta": 0.5, "nesterov": False}
    with pytest.raises(ValueError, match=r"etta=0\.5 is not an option"):
        clone(est).set_params(merge="bmuf", merge__etta=0.5)
    for database in (db, db.url.render_as_string(hide_password=False), None):
        copy = pickle.loads(pickle.dumps(clone(est).set_params(database=database)))
        assert copy.get_params()["merge"] == "average"
    copy = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(flat(copy), flat(est))


def _staged(db) -> list[str]:
    return [str(t.table) for t in list_tables(db) if t.table.schema == staging.schema_of(db)]


def test_arrays_are_staged_for_the_fit_and_dropped_with_the_estimator(db, data):
    x, y = data
    est = make(db).fit(x, y)
    assert len(_staged(db)) == 1 and len(est.history_) == 2
    est.close()
    assert _staged(db) == []
    make(db).fit(x, y)  # dropped when garbage-collected
    gc.collect()
    assert _staged(db) == []
    with pytest.raises(ValueError, match="needs labels"):
        make(db).fit(x)


def test_cross_val_score_and_grid_search_over_merge(db, data):
    x, y = data
    scores = cross_val_score(make(db, iterations=1), x, y, cv=2)
    assert scores.shape == (2,) and np.all((scores >= 0) & (scores <= 1))
    search = GridSearchCV(make(db, iterations=1), {"merge": ["average", "bmuf"]}, cv=2)
    search.fit(x, y)
    assert search.best_params_["merge"] in ("average", "bmuf")
    assert 0 <= search.score(x, y) <= 1
    del search
    gc.collect()
    assert _staged(db) == []
    staged = make(db).fit(x, y)  # a process killed before cleanup leaves one: swept
    staged.__dict__.pop("_staged_finalizer").detach()
    del staged
    gc.collect()
    assert len(_staged(db)) == 1
    url = db.url.render_as_string(hide_password=False)
    argv = ["tables", "drop", "--staging", "--database", url, "--schema", db.schema]
    assert cli.main(argv) == 0 and _staged(db) == []


# -- the command line -----------------------------------------------------------------------------


def test_the_command_line_says_one_line_on_a_database_error(capsys):
    with pytest.raises(SystemExit) as version:
        cli.main(["--version"])
    assert version.value.code == 0 and "gpcnn 0." in capsys.readouterr().out
    code = cli.main(["doctor", "--database", "postgresql://nobody:x@127.0.0.1:1/none"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("gpcnn: error: ") and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit):
        cli.main(["converge", "--dataset", "mnist-sample", "--segments", "2,x"])
    assert "expected integers" in capsys.readouterr().err
