"""Mistakes a first hour makes, each refused (or warned of) in words that name the problem and the
fix, before any work: NaN pixels, an optimizer name Keras does not know, a model compiled with
another optimizer, a last layer that outputs logits, a validation table unlike the training table,
a model with too few output units, a database that cannot be reached and a URL of another
database."""

from __future__ import annotations

import numpy as np
import pytest
from tiny import learnable_images, tiny_cnn

import gpcnn
from gpcnn.data import pixels
from gpcnn.data.tables import TableError, load_images
from gpcnn.engines import DatabaseError, UnreachableError
from gpcnn.estimator import GreenplumCNN
from gpcnn.fit import compiling
from gpcnn.kernel.keras_setup import keras_module
from gpcnn.tools import cli
from gpcnn.tools.commands import _run_text


def _options(optimizer: str = "sgd"):
    return compiling.compile_options(
        optimizer, 0.01, "sparse_categorical_crossentropy", ["accuracy"]
    )


def test_nan_pixels_are_named_as_nan_not_as_out_of_range():
    images = np.full((4, 8, 8), 0.5, np.float32)
    images[1, 2, 3] = np.nan
    with pytest.raises(TableError, match="hold 1 NaN or infinite values: replace or drop"):
        pixels.stored(images)


def test_float_pixels_out_of_range_say_the_range_they_span():
    with pytest.raises(TableError, match=r"these span 0\.5\.\.2: scale them"):
        pixels.stored(np.full((2, 4, 4), 2.0, np.float32) - np.eye(4, dtype=np.float32) * 1.5)


def test_an_optimizer_typo_gets_the_nearest_name_and_the_choices():
    with pytest.raises(ValueError, match=r"did you mean 'adam'\? choose from .*sgd"):
        compiling.check_optimizer("adamm")


def test_every_optimizer_name_offered_is_one_the_fit_can_build():
    for name in compiling.optimizer_names():
        assert _options(name).optimizer["class_name"].lower() == name


def test_the_optimizer_typo_is_refused_before_anything_reaches_the_database():
    est = GreenplumCNN(tiny_cnn(), optimizer="sgdd", database="postgresql://nowhere:1/none")
    with pytest.raises(ValueError, match="did you mean 'sgd'"):
        est.fit(*learnable_images(8))


def test_a_model_compiled_with_another_optimizer_is_warned_of_with_the_parameter_to_pass():
    model = tiny_cnn()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    (warning,) = compiling.model_warnings(model, _options("sgd"))
    assert "compiled with Adam, but the fit trains with SGD" in warning
    assert "pass optimizer='adam'" in warning
    assert compiling.model_warnings(model, _options("adam")) == []


def test_a_last_layer_without_softmax_is_warned_of_as_logits():
    keras = keras_module()
    logits = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    (warning,) = compiling.model_warnings(logits, _options())
    assert "outputs logits (no activation)" in warning and "activation='softmax'" in warning
    assert compiling.model_warnings(tiny_cnn(), _options()) == []


@pytest.fixture(scope="module")
def tables(db):
    x, y = learnable_images(60)
    common = dict(segments=2, replace=True, progress=False)
    train = load_images(db, "messages_train", x, y, **common)
    wide = load_images(db, "messages_wide", np.zeros((20, 8, 10), np.uint8), y[:20], **common)
    return str(train.table), str(wide.table)


def test_a_validation_table_of_other_items_is_named_as_the_odd_one(db, tables):
    train, wide = tables
    est = GreenplumCNN(tiny_cnn(), iterations=1, database=db, verbose=0, threads_per_segment=1)
    with pytest.raises(ValueError, match=f"the validation table {wide} holds items of shape"):
        est.fit(train, validation_data=wide)


def test_too_few_output_units_point_to_passing_the_builder(db, tables):
    train, _ = tables
    est = GreenplumCNN(tiny_cnn(classes=2), iterations=1, database=db, verbose=0)
    with pytest.raises(ValueError) as refused:
        est.fit(train)
    assert "2 output units" in str(refused.value) and "not small_cnn()" in str(refused.value)


def test_a_database_that_cannot_be_reached_is_named_with_where_its_url_came_from(monkeypatch):
    monkeypatch.setenv("GPCNN_DATABASE_URL", "postgresql://someone:secret@127.0.0.1:1/nothing")
    db = gpcnn.connect()
    with pytest.raises(UnreachableError) as refused:
        db.connect()
    message = str(refused.value)
    assert message.startswith("cannot reach the database postgresql+psycopg2://someone:***@")
    assert "(from $GPCNN_DATABASE_URL): connection to server" in message
    assert (
        "check that the server runs (`gpcnn doctor` checks it), or set GPCNN_DATABASE_URL"
        in message
    )
    assert "secret" not in message
    assert isinstance(refused.value, DatabaseError)  # what the layers above already catch


def test_a_url_of_another_database_is_refused_at_connect(monkeypatch):
    monkeypatch.setenv("GPCNN_DATABASE_URL", "mysql://root:pw@localhost/db")
    with pytest.raises(ValueError, match=r"is a mysql URL: .* \(from \$GPCNN_DATABASE_URL\)$"):
        gpcnn.connect()


def test_the_command_line_tells_an_unreachable_database_in_gpcnns_words(capsys):
    assert cli.main(["doctor", "--database", "postgresql://nobody@127.0.0.1:1/none"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("gpcnn: error: cannot reach the database ") and "(the URL given)" in line


@pytest.mark.parametrize("flag", ["--iterations", "--batch-size"])
def test_a_study_of_no_iterations_or_batches_is_refused_before_it_prints_or_loads(
    flag, capsys, tmp_path
):
    out = tmp_path / "study-out"
    with pytest.raises(SystemExit):
        cli.main(["converge", "--dataset", "mnist-sample", flag, "0", "--out", str(out)])
    assert f"{flag}: expected a number >= 1, got 0" in capsys.readouterr().err
    assert not out.exists()


def test_empty_listings_say_so_and_what_makes_an_entry(db, capsys):
    schema = "gpcnn_empty_listings_test"
    base = ["--database", db.url.render_as_string(hide_password=False), "--schema", schema]
    try:
        for command in ("runs", "models", "tables"):
            assert cli.main([command, "list", *base]) == 0
        said = capsys.readouterr().out.splitlines()
        assert said == [
            f"no runs stored in schema '{schema}' yet: a fit stores one",
            f"no models in the library of schema '{schema}': gpcnn.store_model stores one",
            "no image tables yet: gpcnn load or gpcnn.load_images makes one",
        ]
    finally:
        with db.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_runs_show_rounds_its_numbers_for_people():
    shown = {
        "run_id": 3,
        "status": "finished",
        "table": "fm.train",
        "merge": "average",
        "iterations": 2,
        "epochs": 1.0,
        "error": None,
        "params": {"optimizer": "sgd", "learning_rate": 0.1969999998807907},
        "history": [{"iteration": 1, "epoch": 1.0, "loss": 0.123456}],
    }
    head, _, row = _run_text(shown).splitlines()
    assert "learning_rate=0.197" in head and "(1 epochs)" in head
    assert row.split()[:3] == ["1", "1", "0.1235"] and set(row.split()[3:]) == {"-"}


def test_a_pooled_connection_the_server_closed_is_replaced_not_told_as_unreachable(db):
    handle = gpcnn.connect(db.url.render_as_string(hide_password=False), schema="gpcnn_repool")
    try:
        with handle.connect() as conn:
            pid = conn.exec_driver_sql("SELECT pg_catalog.pg_backend_pid()").scalar()
        with db.connect() as other:
            other.exec_driver_sql(f"SELECT pg_catalog.pg_terminate_backend({int(pid)})")
        with handle.connect() as conn:  # the pre-ping finds it dead; the pool opens another
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1
    finally:
        handle.close()
