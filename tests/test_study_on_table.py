"""``gpcnn converge --table``: the study on a table of the user's images already in the database
and a model from the model library. A tiny table of 8×8 images (one row per
image, as MADlib's preprocessor takes it), the tiny CNN of test_training.py stored by name; bad
names refused before any table or file is made; the packed copies dropped unless kept."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_packing import _source as packing_source
from tiny import learnable_images, tiny_cnn

import gpcnn
from gpcnn.data.tables import TableError, describe, list_tables
from gpcnn.engines.identifiers import MAX_NAME_BYTES
from gpcnn.study import experiments, own_data
from gpcnn.tools import cli

RAW = "gpcnn_packing_test"
COPIES = "gpcnn_packing_test_own"  # the packed copies' names start so
MODEL = "own-data-tiny-cnn"


@pytest.fixture(scope="module")
def source(db, schema):
    """A table of 60 images, 3 classes with text labels, and the tiny CNN stored by name."""
    images, labels = learnable_images(60, seed=8)
    pixels = [image.ravel().tolist() for image in images]
    kinds = np.array(["a", "b", "c"])[labels].tolist()
    table = packing_source(db, "own", "smallint[]", range(60), pixels, kinds)
    gpcnn.store_model(db, MODEL, tiny_cnn(), replace=True)
    return own_data.SourceTable(table, x_column="img", y_column="label", id_column="id")


def copies(db) -> list[str]:
    return [str(t.table) for t in list_tables(db) if COPIES in str(t.table)]


def converge(db, source, out, model=MODEL, **options):
    return experiments.converge_on_table(
        db,
        source,
        model,
        [2],
        ["single", "average"],
        [1],
        1,
        out,
        learning_rate=0.05,
        batch_size=16,
        progress=False,
        **options,
    )


def test_the_study_runs_on_the_users_table_and_stored_model_and_drops_its_copies(
    db, source, tmp_path
):
    rows = converge(db, source, tmp_path)
    assert {r["merge"] for r in rows} == {"single", "average"}
    assert {r["dataset"] for r in rows} == {source.table}
    assert all(0 <= r["val_accuracy"] <= 1 for r in rows)
    assert (tmp_path / "report.md").read_text().count(source.table) > 0
    assert list(tmp_path.glob("*.png"))
    run = json.loads(next((tmp_path / "runs").glob("*average*.json")).read_text())
    assert run["spec"]["from_table"] and run["spec"]["library_model"]
    assert run["spec"]["model"] == MODEL
    assert run["segments"]["images_per_segment"] == [30, 30]  # dealt IID, equal shards
    assert copies(db) == []


def test_kept_copies_are_packed_per_k_with_the_validation_tables_classes(db, source, tmp_path):
    validated = own_data.SourceTable(**{**vars(source), "validation_table": source.table})
    converge(db, validated, tmp_path, keep_tables=True, seeds=[1])
    kept = sorted(copies(db))
    try:
        assert [name.rsplit(".", 1)[1] for name in kept] == [
            f"{COPIES}_k1_s1_train",
            f"{COPIES}_k2_s1_train",
            f"{COPIES}_test",
        ]
        for name in kept:
            assert describe(db, name).class_names == ("a", "b", "c")
        assert describe(db, kept[1]).segments == 2
    finally:
        own_data.drop_copies(
            db,
            validated,
            experiments.plan(
                source.table,
                [2],
                ["single", "average"],
                [1],
                1,
                seeds=[1],
                model=MODEL,
                from_table=True,
                library_model=True,
            ),
        )
    assert copies(db) == []


@pytest.mark.parametrize(
    ("change", "model", "message"),
    [
        ({"table": f"{RAW}.missing"}, MODEL, "no table .*missing"),
        ({"x_column": "x"}, MODEL, r"has no column x='x': its columns are id, img, label"),
        ({}, "no-such-model", "no model 'no-such-model'.*or name one of the study's models"),
        ({}, "own-data-wide", r"takes images of shape \(10, 10, 1\) \(100 values\).*holds 64"),
        ({}, "own-data-five", "has 5 output units, but .* has 3 classes"),
        ({"class_values": ("a", "b")}, MODEL, "has 3 output units, but .* has 2 classes"),
        ({"validation_table": f"{RAW}.nope"}, MODEL, "no table .*nope"),
    ],
)
def test_bad_names_are_refused_before_any_table_or_file_is_made(
    db, source, tmp_path, change, model, message
):
    keras = gpcnn.kernel.keras_setup.keras_module()
    wide = keras.Sequential(
        [keras.Input((10, 10, 1)), keras.layers.Flatten(), keras.layers.Dense(3)]
    )
    gpcnn.store_model(db, "own-data-wide", wide, replace=True)
    gpcnn.store_model(db, "own-data-five", tiny_cnn(5), replace=True)
    bad = own_data.SourceTable(**{**vars(source), **change})
    with pytest.raises((ValueError, TableError), match=message):
        converge(db, bad, tmp_path / "out", model=model)
    assert not (tmp_path / "out").exists()
    assert copies(db) == []


def test_an_image_table_gpcnn_made_is_refused_as_a_table_of_rows(db, source, tmp_path):
    images = f"{RAW}.own_loaded"
    gpcnn.load_images(db, images, *learnable_images(20), segments=2, replace=True, progress=False)
    bad = own_data.SourceTable(**{**vars(source), "table": images})
    with pytest.raises(
        TableError, match=r"is an image table gpcnn loaded or packed .* one row per"
    ):
        converge(db, bad, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_command_line_takes_a_table_and_its_columns_or_a_dataset_never_both():
    args = cli.build_parser().parse_args(
        [
            "converge",
            "--table",
            "s.t",
            "--x-column",
            "pixels",
            "--model",
            "mine",
            "--keep-tables",
            "--merge-option",
            "batchnorm_statistics=pooled",
        ]
    )
    assert (args.table, args.x_column, args.y_column, args.model) == ("s.t", "pixels", "y", "mine")
    assert args.keep_tables and args.merge_option == [("batchnorm_statistics", ["pooled"])]
    for bad in (["--table", "s.t", "--dataset", "mnist-sample"], []):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(["converge", *bad])


def test_a_layout_by_a_column_keeps_its_values_together_beside_the_iid_copy(db, source, tmp_path):
    rows = converge(db, source, tmp_path, layouts=[None, "label"], keep_tables=True)
    try:
        settings = {r["setting"] for r in rows if r["merge"] == "average"}
        assert settings == {
            f"{source.table}-average-k2-m1-{MODEL}",
            f"{source.table}-average-k2-m1-{MODEL}-by-label",
        }
        by_label = [t for t in copies(db) if "_k2_by" in t]
        assert len(by_label) == 1 and len(copies(db)) == 3  # and the IID K = 1, K = 2 copies
        info = describe(db, by_label[0])
        assert info.segments == 2
        assert info.label_skew.max > 0.5  # each label on one segment: 3 labels, 2 segments
    finally:
        own_data.drop_copies(
            db,
            source,
            experiments.plan(
                source.table,
                [2],
                ["single", "average"],
                [1],
                1,
                model=MODEL,
                from_table=True,
                library_model=True,
                layouts=[None, "label"],
            ),
        )
    assert copies(db) == []


def test_a_layout_names_a_column_of_the_table_and_only_a_table_has_one(db, source, tmp_path):
    with pytest.raises(TableError, match=r"has no column distribute_by='site'"):
        converge(db, source, tmp_path / "out", layouts=["site"])
    assert not (tmp_path / "out").exists() and copies(db) == []
    with pytest.raises(ValueError, match="distribute_by lays out a table of your images"):
        experiments.plan("fashion-mnist", [2], ["average"], [1], 1, layouts=["label"])
    args = cli.build_parser().parse_args(
        ["converge", "--table", "s.t", "--distribute-by", "iid,site"]
    )
    assert args.distribute_by == [None, "site"]


def test_a_table_refuses_a_skew_before_any_work(db, source, tmp_path):
    with pytest.raises(ValueError, match="dealt IID: run it without a skew"):
        converge(db, source, tmp_path, skews=[0.1])


def test_a_copys_name_is_the_sources_cut_with_a_hash_to_fit_gpcnn_s_limit():
    spec = experiments.RunSpec("s.t", "average", 16, 1, 1, seed=123)
    assert own_data.copy_name("gpcnn", "Raw.Images", spec, "train") == (
        "gpcnn_images.raw_images_k16_s123_train"
    )
    assert own_data.copy_name("gpcnn", "Raw.Images", spec, "test") == "gpcnn_images.raw_images_test"
    long = own_data.copy_name("gpcnn", "warehouse.camera_images_2026", spec, "train")
    other = own_data.copy_name("gpcnn", "warehouse.camera_images_2027", spec, "train")
    table = long.split(".")[1]
    assert len(table) == MAX_NAME_BYTES and table.endswith("_k16_s123_train")
    assert table.startswith("warehouse_camera_") and long != other
