"""The model library (models stored under a name, MADlib's model architecture table) and
prediction without fit (``gpcnn.predict``), checked against local Keras."""

from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy as sa
from tiny import dense_net, learnable_images, tiny_cnn

import gpcnn
from gpcnn.data.tables import load_images, read_images
from gpcnn.engines.catalog import Catalog
from gpcnn.engines.migrations import SHAPE_VERSION
from gpcnn.estimator import GreenplumCNN
from gpcnn.fit.validation import model_input
from gpcnn.kernel import keras_setup, wire

keras = keras_setup.keras_module()
DATA = "gpcnn_library_test"


@pytest.fixture(scope="module")
def table(db):
    x, y = learnable_images(60)
    name = f"{DATA}.images"
    load_images(
        db,
        name,
        x,
        y,
        ids=500 + np.arange(len(y)),
        segments=2,
        buffer_size=20,
        class_names=["a", "b", "c"],
        replace=True,
        progress=False,
    )
    return name


@pytest.fixture()
def stored(db):
    names = []

    def store(name, model, **options):
        names.append(gpcnn.store_model(db, name, model, **options))
        return name

    yield store
    for name in names:
        gpcnn.delete_model(db, name)


def test_a_stored_model_loads_back_with_its_architecture_and_weights(db, stored):
    model = tiny_cnn()
    stored("lib-tiny", model, description="conv then dense")
    loaded = gpcnn.load_model(db, "lib-tiny")
    assert loaded.to_json() == model.to_json()
    np.testing.assert_array_equal(
        wire.flatten(loaded.get_weights()), wire.flatten(model.get_weights())
    )
    (row,) = [m for m in gpcnn.list_models(db) if m["name"] == "lib-tiny"]
    assert row["weights"] and row["description"] == "conv then dense"
    assert row["stored_bytes"] == 4 * model.count_params()
    with db.connect() as conn:
        assert Catalog(conn, db.backend).shape() == SHAPE_VERSION


def test_an_architecture_stored_without_weights_is_built_with_fresh_ones(db, stored):
    stored("lib-bare", dense_net(), weights=False)
    (row,) = [m for m in gpcnn.list_models(db) if m["name"] == "lib-bare"]
    assert not row["weights"] and row["stored_bytes"] == 0
    assert gpcnn.load_model(db, "lib-bare").count_params() == dense_net().count_params()


def test_a_name_is_not_overwritten_without_replace_and_delete_says_whether_it_was_there(db, stored):
    stored("lib-once", dense_net())
    with pytest.raises(ValueError, match="pass replace=True"):
        gpcnn.store_model(db, "lib-once", tiny_cnn())
    gpcnn.store_model(db, "lib-once", tiny_cnn(), replace=True)
    layers = [type(layer).__name__ for layer in gpcnn.load_model(db, "lib-once").layers]
    assert layers == ["Conv2D", "Flatten", "Dense"]
    assert gpcnn.delete_model(db, "lib-once") is True
    assert gpcnn.delete_model(db, "lib-once") is False
    with pytest.raises(ValueError, match=r"no model 'lib-once'.*store_model"):
        gpcnn.load_model(db, "lib-once")


def test_a_lambda_layer_is_refused_before_anything_is_stored(db):
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Lambda(lambda t: t * 2),
            keras.layers.Flatten(),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    with pytest.raises(ValueError, match=r"safe mode.*Lambda"):
        gpcnn.store_model(db, "lib-lambda", model)
    assert "lib-lambda" not in [m["name"] for m in gpcnn.list_models(db)]


def test_the_estimator_fits_a_stored_model_from_its_stored_weights(db, table, stored):
    model = dense_net()
    model.set_weights([w + 0.25 for w in model.get_weights()])
    stored("lib-start", model)
    common = dict(
        iterations=1,
        learning_rate=0.05,
        batch_size=16,
        seed=3,
        database=db,
        threads_per_segment=1,
        verbose=0,
    )
    by_name = GreenplumCNN("lib-start", **common).fit(table)
    by_object = GreenplumCNN(model, **common).fit(table)
    np.testing.assert_array_equal(
        wire.flatten(by_name.model_.get_weights()), wire.flatten(by_object.model_.get_weights())
    )
    assert by_name.get_params()["model"] == "lib-start"


def test_predict_without_fit_writes_the_estimators_tables_and_matches_local_keras(
    db, table, stored
):
    model = tiny_cnn()
    stored("lib-predict", model)
    x, _, ids = read_images(db, table, ids=True)
    local = np.asarray(model.predict(model_input(x), verbose=0))
    back = gpcnn.predict(db, "lib-predict", table, pred_type="prob", threads_per_segment=1)
    np.testing.assert_allclose(back, local, atol=1e-6)
    np.testing.assert_array_equal(gpcnn.predict(db, model, table), np.argmax(local, axis=1))

    out = f"{DATA}.predicted"
    by_id = dict(zip(ids.tolist(), local, strict=True))
    assert gpcnn.predict(db, "lib-predict", table, output_table=out, replace=True) == out
    with db.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT * FROM {out} ORDER BY id")).all()
    assert [r.id for r in rows] == sorted(by_id)
    for r in rows:
        assert r.class_value == int(np.argmax(by_id[r.id]))
        assert r.class_name == "abc"[r.class_value]
        assert r.prob == pytest.approx(float(by_id[r.id].max()), abs=1e-6)
    gpcnn.predict(db, model, table, output_table=out, pred_type="topk", top_k=2, replace=True)
    with db.connect() as conn:
        assert conn.execute(sa.text(f"SELECT count(*) FROM {out}")).scalar() == 2 * len(ids)
    with pytest.raises(ValueError, match="writes a table: pass output_table"):
        gpcnn.predict(db, model, table, pred_type="topk", top_k=2)


def test_the_command_line_lists_shows_and_deletes_stored_models(db, capsys):
    from gpcnn.tools import cli

    model = dense_net()
    model.layers[-1].trainable = False
    gpcnn.store_model(db, "lib-cli", model, description="for the CLI", replace=True)
    base = ["--database", db.url.render_as_string(hide_password=False), "--schema", db.schema]
    assert cli.main(["models", "list", *base]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("lib-cli ")]
    assert "weights 0.0 MB" in line and line.endswith("for the CLI")
    assert cli.main(["models", "show", "lib-cli", *base]) == 0
    shown = capsys.readouterr().out
    assert f"{model.count_params():,} weights" in shown and "Dense  (frozen)" in shown
    assert cli.main(["models", "delete", "lib-cli", *base]) == 0
    assert "deleted model lib-cli" in capsys.readouterr().out
    assert cli.main(["models", "delete", "lib-cli", *base]) == 1
    assert "no model 'lib-cli' to delete" in capsys.readouterr().err
