"""The model hopper (``gpcnn.fit_multiple``, ``GreenplumModelSearch``): its schedule when there are
fewer models than segments or a number that is not a multiple, exactness against one process
training over the keys in the visiting order, runs and resume, refusals before any training, and
per-configuration evaluate and predict. Every test runs in both dispatch modes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from test_rules_db import shards
from tiny import dense_net, learnable_images, tiny_cnn

import gpcnn
from gpcnn.data.tables import describe, load_images
from gpcnn.estimator.hopper import rotation
from gpcnn.fit import runs
from gpcnn.kernel import keras_setup, keras_state, segment, wire

pytestmark = pytest.mark.every_dispatch

keras = keras_setup.keras_module()

DATA_SCHEMA = "gpcnn_hopper_test"
TRAIN = f"{DATA_SCHEMA}.train"  # 2 segments
WIDE = f"{DATA_SCHEMA}.wide"  # 3 segments
VALID = f"{DATA_SCHEMA}.valid"
COMMON = dict(batch_size=16, seed=11, threads_per_segment=1)


@pytest.fixture(scope="module")
def tables(db, schema):
    images, labels = learnable_images(150)
    for name, segments in ((TRAIN, 2), (WIDE, 3)):
        load_images(
            db,
            name,
            images,
            labels,
            segments=segments,
            buffer_size=20,
            replace=True,
            progress=False,
        )
    load_images(db, VALID, images[:60], labels[:60], segments=2, replace=True, progress=False)
    return {"train": describe(db, TRAIN), "wide": describe(db, WIDE)}


def momentum():
    return keras.optimizers.SGD(0.05, momentum=0.9)


def run_count(db) -> int:
    with db.connect() as conn:
        return conn.execute(sa.text(f"SELECT count(*) FROM {db.schema}.runs")).scalar()


def test_fewer_models_than_segments_leave_segments_idle_and_each_model_visits_every_key():
    schedule = rotation.hops(2, [10, 11, 12])
    assert len(schedule) == 3  # K hops per epoch, one segment idle in each
    assert all(len(hop) == 2 and len(set(hop.values())) == 2 for hop in schedule)
    for m in range(2):
        assert sorted(hop[m] for hop in schedule) == [10, 11, 12]


def test_more_models_than_segments_not_a_multiple_keep_every_segment_busy_and_models_wait():
    schedule = rotation.hops(5, [10, 11, 12])
    assert len(schedule) == 5  # M hops per epoch
    assert all(sorted(hop.values()) == [10, 11, 12] for hop in schedule)  # no segment idle
    for m in range(5):
        visits = [hop[m] for hop in schedule if m in hop]
        assert sorted(visits) == [10, 11, 12]  # waits M - K = 2 hops


def trained_in_process(model, buffers, keys, epochs):
    """Sequential SGD: one model, one optimizer, over each key's buffers in order, key after key."""
    local = keras.models.model_from_json(model.to_json())
    local.set_weights(model.get_weights())
    local.compile(
        optimizer=momentum(), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    for epoch in range(epochs):
        for visit, key in enumerate(keys, start=epoch * len(keys) + 1):
            keras_state.seed_everything(local, 11, visit, 0)
            for images, labels in buffers[key]:
                x = segment.to_model_input(images)
                for i in range(0, len(x), 16):
                    local.train_on_batch(x[i : i + 16], labels[i : i + 16])
    return wire.flatten(local.get_weights())


def test_one_model_under_the_hopper_equals_sequential_training_in_the_visiting_order(db, tables):
    model = tiny_cnn()
    [est] = gpcnn.fit_multiple(
        db,
        TRAIN,
        [{"model": model, "optimizer": momentum()}],
        epochs=2,
        learning_rate=None,
        **COMMON,
    )
    keys = list(tables["train"].keys)
    want = trained_in_process(model, shards(db, tables["train"]), keys, 2)
    np.testing.assert_array_equal(wire.flatten(est.model_.get_weights()), want)
    assert [row["images"] for row in est.history_] == [150, 150]
    assert runs.load_run(db, est.run_id_).status == "finished"


def test_models_rotate_over_three_segments_and_a_resumed_search_equals_an_uninterrupted_one(
    db, tables
):
    configs = [
        {"model": dense_net(), "learning_rate": 0.05},
        {"model": dense_net(), "learning_rate": 0.01},
    ]
    whole = gpcnn.fit_multiple(db, WIDE, configs, epochs=2, validation_table=VALID, **COMMON)
    assert all([r["images"] for r in est.history_] == [150, 150] for est in whole)
    assert all("val_accuracy" in est.history_[-1] for est in whole)
    first = gpcnn.fit_multiple(db, WIDE, configs, epochs=1, validation_table=VALID, **COMMON)
    ids = [est.run_id_ for est in first]
    resumed = gpcnn.fit_multiple(
        db, WIDE, configs, epochs=2, validation_table=VALID, resume=ids, **COMMON
    )
    for a, b in zip(whole, resumed, strict=True):
        np.testing.assert_array_equal(
            wire.flatten(a.model_.get_weights()), wire.flatten(b.model_.get_weights())
        )
        assert len(b.history_) == 2
    assert [est.run_id_ for est in resumed] == ids


def test_a_run_resumed_beside_one_an_epoch_ahead_keeps_its_own_place_in_the_rotation(db, tables):
    """A client killed between two runs' rows of one epoch leaves them an epoch apart: the one
    behind must still visit the keys in its own order, not the order of a search of one."""
    configs = [
        {"model": dense_net(), "learning_rate": 0.05},
        {"model": dense_net(), "learning_rate": 0.01},
    ]
    whole = gpcnn.fit_multiple(db, WIDE, configs, epochs=2, **COMMON)
    behind = gpcnn.fit_multiple(db, WIDE, configs, epochs=1, **COMMON)
    ids = [whole[0].run_id_, behind[1].run_id_]
    mixed = gpcnn.fit_multiple(db, WIDE, configs, epochs=2, resume=ids, **COMMON)
    for a, b in zip(whole, mixed, strict=True):
        np.testing.assert_array_equal(
            wire.flatten(a.model_.get_weights()), wire.flatten(b.model_.get_weights())
        )
    assert [len(runs.load_run(db, i).iterations) for i in ids] == [2, 2]


def test_a_resume_naming_the_runs_in_another_order_is_refused_before_any_training(db, tables):
    configs = [
        {"model": dense_net(), "learning_rate": 0.05},
        {"model": dense_net(), "learning_rate": 0.01},
    ]
    ids = [est.run_id_ for est in gpcnn.fit_multiple(db, WIDE, configs, epochs=1, **COMMON)]
    with pytest.raises(
        ValueError, match=r"at another place in the search \(configuration 1 of 2\)"
    ):
        gpcnn.fit_multiple(db, WIDE, configs, epochs=2, resume=ids[::-1], **COMMON)
    with pytest.raises(ValueError, match=r"run \d+ was started with other parameters"):
        gpcnn.fit_multiple(db, WIDE, configs, epochs=2, resume=ids, batch_size=8, seed=11)
    assert [len(runs.load_run(db, i).iterations) for i in ids] == [1, 1]


def test_a_configurations_run_is_not_resumed_by_a_plain_fit_under_a_merge_rule(db, tables):
    (est,) = gpcnn.fit_multiple(db, TRAIN, [{"model": dense_net()}], epochs=1, **COMMON)
    plain = gpcnn.GreenplumCNN(dense_net(), iterations=2, database=db, **COMMON)
    with pytest.raises(ValueError, match=rf"run {est.run_id_} is one configuration .*fit_multiple"):
        plain.fit(TRAIN, resume=est.run_id_)
    assert len(runs.load_run(db, est.run_id_).iterations) == 1


@pytest.mark.parametrize(
    "bad, named",
    [
        ({"model": dense_net(), "optimizer": "no_such_optimizer"}, "configuration 1"),
        ({"model": dense_net(classes=4)}, "configuration 1 (model="),
        ({"model": dense_net(), "merge": "bmuf"}, "the hopper sets merge"),
    ],
)
def test_a_bad_configuration_is_refused_before_any_run_naming_it(db, tables, bad, named):
    before = run_count(db)
    with pytest.raises(ValueError, match=named.replace("(", r"\(")):
        gpcnn.fit_multiple(db, TRAIN, [{"model": dense_net()}, bad], **COMMON)
    assert run_count(db) == before


def test_a_duplicate_configuration_is_refused_naming_both(db, tables):
    net = dense_net()
    configs = [{"model": net, "learning_rate": 0.1}, {"model": net, "learning_rate": 0.1}]
    with pytest.raises(ValueError, match=r"configuration 1 .* duplicates configuration 0"):
        gpcnn.fit_multiple(db, TRAIN, configs, **COMMON)


def test_a_search_picks_the_best_configuration_which_evaluates_and_predicts_into_a_table(
    db, tables
):
    search = gpcnn.GreenplumModelSearch(
        {"learning_rate": [0.0001, 0.1], "batch_size": [16]},
        epochs=2,
        validation_table=VALID,
        database=db,
        estimator_params={"model": dense_net(), "seed": 11, "threads_per_segment": 1},
    )
    search.fit(TRAIN)
    assert len(search.estimators_) == 2 and sorted(search.cv_results_["rank"]) == [1, 2]
    assert search.best_params_["learning_rate"] == 0.1
    assert 0 <= search.estimators_[0].evaluate(VALID)["accuracy"] <= 1
    out = search.predict(VALID, output_table=f"{DATA_SCHEMA}.hopper_pred", replace=True)
    with db.connect() as conn:
        assert conn.execute(sa.text(f"SELECT count(*) FROM {out}")).scalar() == 60


CHILD = """
import json, sys
sys.path.insert(0, "tests")
import gpcnn
from tiny import dense_net
url, schema, dispatch, table = sys.argv[1:]
none = lambda v: None if v == "-" else v
db = gpcnn.connect(none(url), schema=schema, dispatch=none(dispatch))
configs = [{"model": dense_net(), "learning_rate": 0.05}, {"model": dense_net(), "learning_rate": 0.01}]
gpcnn.fit_multiple(db, table, configs, epochs=100, batch_size=16, seed=11, threads_per_segment=1,
                   on_start=lambda ids: print(json.dumps(ids), flush=True))
"""


@pytest.mark.slow
def test_a_search_whose_client_is_killed_resumes_from_each_runs_last_epoch_exactly(
    native_db, schema
):
    """Native dispatch only (a child process's start is the cost; resume in both modes is the
    test above), on a table of its own."""
    from conftest import database_url

    table = f"{DATA_SCHEMA}.killed"
    images, labels = learnable_images(90)
    load_images(
        native_db, table, images, labels, segments=3, buffer_size=30, replace=True, progress=False
    )
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            database_url() or "-",
            schema,
            native_db.dispatch or "-",
            table,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    try:
        ids = json.loads(child.stdout.readline())
        deadline = time.monotonic() + 300
        while min(len(runs.load_run(native_db, i).iterations) for i in ids) < 1:
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    stored = [len(runs.load_run(native_db, i).iterations) for i in ids]
    epochs = max(stored) + 1
    configs = [
        {"model": dense_net(), "learning_rate": 0.05},
        {"model": dense_net(), "learning_rate": 0.01},
    ]
    resumed = gpcnn.fit_multiple(native_db, table, configs, epochs=epochs, resume=ids, **COMMON)
    whole = gpcnn.fit_multiple(native_db, table, configs, epochs=epochs, **COMMON)
    for a, b in zip(whole, resumed, strict=True):
        np.testing.assert_array_equal(
            wire.flatten(a.model_.get_weights()), wire.flatten(b.model_.get_weights())
        )
    assert all(runs.load_run(native_db, i).status == "finished" for i in ids)


def test_study_part_h_plans_each_configuration_under_the_hopper_and_each_merge():
    from gpcnn.study import hopper_vs_merge

    configs = hopper_vs_merge.parse_configurations("momentum:0.01:32, adam:0.001:64")
    runs_of = hopper_vs_merge.plan(
        "mnist-sample", configs, ["average", "bmuf"], 4, 3, model="bn-cnn"
    )
    assert list(runs_of) == ["hopper", "average", "bmuf"]
    assert [(s.optimizer, s.learning_rate, s.batch_size) for s in runs_of["bmuf"]] == configs
    with pytest.raises(ValueError, match="optimizer:learning_rate:batch_size"):
        hopper_vs_merge.parse_configurations("momentum:0.01")
    with pytest.raises(ValueError, match="merges"):
        hopper_vs_merge.plan("mnist-sample", configs, ["single"], 4, 3)


def test_part_h_reports_means_over_seeds_and_the_hoppers_difference_with_its_error_bar(tmp_path):
    from gpcnn.study import hopper_vs_merge

    configs = hopper_vs_merge.parse_configurations("momentum:0.01:32, adam:0.001:64")
    runs_of = hopper_vs_merge.plan("mnist-sample", configs, ["average"], 4, 2, seeds=(0, 1))
    assert [(s.seed, s.optimizer) for s in runs_of["hopper"]] == [
        (0, "momentum"),
        (0, "adam"),
        (1, "momentum"),
        (1, "adam"),
    ]
    # Finished runs, as a study leaves them: the hopper 0.90/0.92 at epoch 2, the average 0.88.
    final = {("hopper", 0): 0.90, ("hopper", 1): 0.92, ("average", 0): 0.88, ("average", 1): 0.88}
    for method, specs in runs_of.items():
        for spec in specs:
            history = [
                {"epoch": e, "iteration": e, "val_accuracy": v, "seconds": 10.0, "images": 8}
                for e, v in ((1, 0.5), (2, final[method, spec.seed]))
            ]
            done = hopper_vs_merge.folder(tmp_path, spec) / "runs" / f"{spec.name}.json"
            done.parent.mkdir(parents=True, exist_ok=True)
            done.write_text(json.dumps({"spec": dataclasses.asdict(spec), "history": history}))
    text = hopper_vs_merge.run_part(None, runs_of, tmp_path, progress=False, target=0.9)
    assert "| momentum lr=0.01 batch=32 | 2 | 0.9100 ± 0.0141 | 0.8800 ± 0.0000 |" in text
    # +3 points, SE = sqrt(0.0141²/2 + 0) = 0.01: 2·SE = 2 points, so the difference is real
    assert "| momentum lr=0.01 batch=32 | +3.00 ± 2.00 (real) |" in text
    assert "| momentum lr=0.01 batch=32 | 2, 2 | never, never |" in text
    rows = (tmp_path / "history.csv").read_text().splitlines()
    assert (
        len(rows) == 1 + 2 * 2 * 2 * 2
    )  # a header, then configurations × methods × seeds × epochs
    assert (tmp_path / "mop_vs_merge.png").stat().st_size > 0
