"""Inputs of any shape the model takes, labels of any type, pixels of any numeric dtype:
feature rows, flat rows reshaped to an image model's input in the database and locally, tables
that hold either, string labels through fit and predict, and the shapes refused before any work."""

from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy as sa
from tiny import dense_rows, learnable_images, tiny_cnn

import gpcnn
from gpcnn.data import array_checks, pixels
from gpcnn.data.tables import TableError, describe, load_images, read_images
from gpcnn.estimator import GreenplumCNN

pytestmark = pytest.mark.every_dispatch
SPECIES = np.array(["setosa", "versicolor", "virginica"])


def _estimator(db, model, **kw) -> GreenplumCNN:
    return GreenplumCNN(
        model,
        iterations=1,
        batch_size=16,
        seed=3,
        database=db,
        verbose=0,
        threads_per_segment=1,
        **kw,
    )


@pytest.mark.parametrize(
    ("data", "model", "expected"),
    [
        ((4,), (4,), (4,)),
        ((64,), (8, 8, 1), (8, 8, 1)),
        ((8, 8, 1), (64,), (64,)),
        ((8, 8, 1), (8, 8), (8, 8)),
        ((28, 28), (28, 28, 1), (28, 28, 1)),
    ],
)
def test_items_reach_a_model_of_their_shape_or_flat_of_as_many_values(data, model, expected):
    assert pixels.fitted_shape(data, model, where="t") == expected


@pytest.mark.parametrize(
    ("data", "model", "message"),
    [
        ((8, 8, 2), (16, 8, 1), r"reshape the data to \(N, 16, 8, 1\) or flatten it to \(N, 128\)"),
        ((3,), (4,), "X has 3 features, but gpcnn is expecting 4 features"),
        ((8, 8, 1), (10,), r"takes inputs of shape \(10,\).*change the model's Input"),
    ],
)
def test_an_ambiguous_or_wrong_shape_is_refused_saying_what_to_pass(data, model, message):
    with pytest.raises(ValueError, match=message):
        pixels.fitted_shape(data, model, where="t", caller="gpcnn")


def test_any_integer_dtype_is_a_pixel_and_float_rows_are_kept_as_float32():
    images = np.arange(2 * 4, dtype=np.int64).reshape(2, 2, 2, 1)
    assert pixels.stored(images).dtype == np.uint8
    np.testing.assert_array_equal(pixels.to_input(images), pixels.to_input(images.astype(np.uint8)))
    rows = np.array([[-1.5, 7.25], [0.0, 1e6]])
    assert pixels.stored(rows).dtype == np.float32
    np.testing.assert_array_equal(pixels.to_input(rows), rows.astype(np.float32))
    with pytest.raises(TableError, match=r"integer pixels lie in 0\.\.255"):
        pixels.stored(np.array([[300, 1]]))
    with pytest.raises(ValueError, match="Negative values"):
        array_checks.check_images(-np.ones((2, 3)))  # rows of any sign only where the tags say so
    assert array_checks.check_images(-np.ones((2, 3)), positive_only=False).min() == -1


def test_labels_of_any_type_map_to_their_sorted_values_or_are_class_indices():
    classes, codes = array_checks.fit_classes(np.array(["b", "a", "b"]), None)
    assert classes.tolist() == ["a", "b"] and codes.tolist() == [1, 0, 1]
    classes, codes = array_checks.fit_classes(np.array([9, 3, 7]), 3)
    assert classes.tolist() == [3, 7, 9] and codes.tolist() == [2, 0, 1]
    classes, codes = array_checks.fit_classes(np.array([0, 1, 1]), 3)  # indices of 3 units
    assert classes.tolist() == [0, 1, 2] and codes.tolist() == [0, 1, 1]
    with pytest.raises(ValueError, match=r"y holds 'z', not one of the classes \('a', 'b'\)"):
        array_checks.known_classes(np.array(["a", "z"]), np.array(["a", "b"]))


def test_feature_rows_load_as_float32_and_read_back_as_they_were(db):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 5))
    info = load_images(
        db,
        "inputs_rows",
        x,
        SPECIES[rng.integers(0, 3, 12)],
        segments=2,
        replace=True,
        progress=False,
    )
    assert info.image_shape == (5,) and info.class_names == tuple(SPECIES)
    back, labels, ids = read_images(db, "inputs_rows", ids=True)
    np.testing.assert_array_equal(back, x[ids].astype(np.float32))
    assert back.dtype == np.float32 and labels.max() == 2


@pytest.mark.slow
def test_flat_rows_train_an_image_model_as_its_images_do(db):
    x, y = learnable_images(48)
    flat = x.reshape(len(x), -1).astype(np.int64)  # the MNIST-as-CSV layout, int64 pixels
    with _estimator(db, tiny_cnn()) as images, _estimator(db, tiny_cnn()) as rows:
        images.fit(x, y)
        rows.fit(flat, y)
        assert rows.n_features_in_ == 64 and not hasattr(images, "n_features_in_")
        np.testing.assert_array_equal(rows.model_.get_weights()[0], images.model_.get_weights()[0])
        np.testing.assert_allclose(rows.predict_proba(flat), images.predict_proba(x), rtol=1e-6)
        np.testing.assert_allclose(rows.predict_proba(x), images.predict_proba(x), rtol=1e-6)
        with pytest.raises(ValueError, match="X has 63 features, but GreenplumCNN is expecting 64"):
            rows.predict(flat[:, 1:])


@pytest.mark.slow
def test_string_labels_come_back_from_predict_and_into_a_table_by_name(db, tmp_path):
    rng = np.random.default_rng(1)
    y = SPECIES[rng.integers(0, 3, 60)]
    x = rng.normal(size=(60, 4)) + (np.searchsorted(SPECIES, y)[:, None] * 2.0)
    load_images(db, "inputs_species", x, y, segments=2, replace=True, progress=False)
    with _estimator(db, dense_rows, optimizer="adam", learning_rate=0.05) as est:
        est.fit(x, y, validation_data=(x[:10], y[:10]))
        assert est.classes_.tolist() == SPECIES.tolist() and est.n_features_in_ == 4
        assert set(est.predict(x)) <= set(SPECIES) and est.predict(x).dtype.kind == "U"
        assert est.predict_proba(x).shape == (60, 3) and "val_loss" in est.history_[-1]
        assert est.score(x, y) > 0.5 and set(est.evaluate(x, y)) >= {"loss", "accuracy"}
        table = est.predict("inputs_species", output_table="inputs_species_out", replace=True)
        est.save(tmp_path / "species.keras")
        loaded = GreenplumCNN.load(tmp_path / "species.keras")
        assert loaded.n_features_in_ == 4
        np.testing.assert_array_equal(loaded.predict(x), est.predict(x))
    with db.connect() as conn:
        names = set(conn.execute(sa.text(f"SELECT DISTINCT class_name FROM {table}")).scalars())
    assert names <= set(SPECIES)


def test_pack_table_packs_feature_rows_and_refuses_a_bad_shape(db):
    raw = f"{db.backend.default_schema}.inputs_raw"  # where gpcnn reads "inputs_raw" from
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {raw}")
        conn.exec_driver_sql(f"CREATE TABLE {raw} (id int, f real[], label int)")
        rows = [{"i": i, "f": [i / 10, 0.5, 0.25, 0, 1], "y": 3 + 4 * (i % 2)} for i in range(8)]
        conn.execute(sa.text(f"INSERT INTO {raw} VALUES (:i, :f, :y)"), rows)
    info = gpcnn.pack_table(
        db,
        "inputs_raw",
        "inputs_packed",
        x_column="f",
        y_column="label",
        id_column="id",
        shape=(5,),
        normalized=True,
        segments=2,
        replace=True,
    )
    assert describe(db, "inputs_packed").image_shape == (5,) and info.class_names == ("3", "7")
    x, _ = read_images(db, "inputs_packed")
    assert x.dtype == np.uint8 and x.shape == (8, 5)
    with pytest.raises(TableError, match=r"give shape=\(H, W, C\), or shape=\(5,\)"):
        gpcnn.pack_table(
            db,
            "inputs_raw",
            "inputs_never",
            x_column="f",
            y_column="label",
            id_column="id",
            segments=2,
        )
    with pytest.raises(ValueError, match=r"takes inputs of shape \(4,\).*inputs_packed"):
        gpcnn.predict(db, dense_rows((4,), 2), "inputs_packed")
