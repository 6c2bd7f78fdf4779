"""Fits on label-skewed tables: the warning that names the remedies, the
index recorded with the run, and a table with a shared sample trained and resumed exactly.

The tiny CNN of test_training.py on 150 8x8 images of 3 classes, packed by label on 2 segments
(one segment holds one class alone: skew 2/3), with and without a 20 % shared sample.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import sqlalchemy as sa
from tiny import learnable_images, tiny_cnn

import gpcnn
from gpcnn.data.label_skew import SKEW_THRESHOLD
from gpcnn.estimator import GreenplumCNN
from gpcnn.kernel import wire

pytestmark = pytest.mark.every_dispatch

SRC = "gpcnn_skew_fit_test"


@pytest.fixture(scope="module")
def model():
    return tiny_cnn()


@pytest.fixture(scope="module")
def tables(db, schema):
    x, y = learnable_images(150)
    with db.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {SRC}")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {SRC}.rows")
        conn.exec_driver_sql(f"CREATE TABLE {SRC}.rows (id bigint, img bytea, label integer)")
        conn.execute(
            sa.text(f"INSERT INTO {SRC}.rows VALUES (:id, :img, :label)"),
            [{"id": i, "img": x[i].tobytes(), "label": int(y[i])} for i in range(len(x))],
        )
    packed = {}
    for name, sample in (("by_label", None), ("shared", 0.2)):
        packed[name] = gpcnn.pack_table(
            db,
            f"{SRC}.rows",
            f"{SRC}.{name}",
            x_column="img",
            y_column="label",
            id_column="id",
            segments=2,
            buffer_size=20,
            distribute_by="label",
            shared_sample=sample,
            replace=True,
        )
    return packed


def fit(db, model, table, resume=None, iterations=1) -> GreenplumCNN:
    est = GreenplumCNN(
        model,
        optimizer="sgd",
        learning_rate=0.05,
        batch_size=16,
        iterations=iterations,
        seed=11,
        database=db,
        threads_per_segment=1,
        verbose=0,
    )
    with est:
        est.fit(str(table.table), resume=resume)
    return est


def test_a_fit_on_a_skewed_table_warns_with_the_remedies_and_its_run_records_the_index(
    db, model, tables, caplog
):
    info = tables["by_label"]
    assert info.label_skew.max > SKEW_THRESHOLD
    with caplog.at_level(logging.WARNING, logger="gpcnn"):
        est = fit(db, model, info)
    [warning] = [r.getMessage() for r in caplog.records if "label skew" in r.getMessage()]
    for remedy in ("gpcnn.add_shared_sample", "0.9 points below", "gpcnn.redeal", "gpcnn.forecast"):
        assert remedy in warning
    for useless in ("FedNova", "BatchNorm"):  # the study measured them as no remedy
        assert useless not in warning
    params = gpcnn.show_run(db, est.run_id_)["params"]
    assert params["label_skew"] == {"max": info.label_skew.max, "mean": info.label_skew.mean}


def test_a_fit_on_a_table_with_a_shared_sample_trains_every_copy_and_resumes_exactly(
    db, model, tables
):
    info = tables["shared"]
    assert info.images == 150 and sum(info.images_per_segment) == 150 + 2 * 30
    whole = fit(db, model, info, iterations=2)
    assert [r["images"] for r in whole.history_] == [210, 210]
    first = fit(db, model, info)
    resumed = fit(db, model, info, resume=first.run_id_, iterations=2)
    assert [r["iteration"] for r in resumed.history_] == [1, 2]
    np.testing.assert_array_equal(
        wire.flatten(resumed.model_.get_weights()), wire.flatten(whole.model_.get_weights())
    )


def test_a_table_with_a_shared_sample_is_not_told_to_add_one():
    from types import SimpleNamespace

    from gpcnn.data.label_skew import remedies

    assert "add_shared_sample" in remedies(SimpleNamespace(shared_images=0))[0]
    assert not any("add_shared_sample" in r for r in remedies(SimpleNamespace(shared_images=30)))
