"""pack_table against the real server: a table of images in the database becomes a gpcnn image
table exactly as load_images would make it, every bad row refused by its id, nothing half-made."""

from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy as sa

import gpcnn
from gpcnn.data.tables import TableError, describe, load_images, read_images

SRC = "gpcnn_packing_test"
LABELS = np.array(["eel", "cat", "dog"])  # sorted class values: cat, dog, eel


def _source(db, name: str, x_type: str, ids, images, labels, label_type="text") -> str:
    table = f"{SRC}.{name}"
    with db.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {SRC}")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        conn.exec_driver_sql(f"CREATE TABLE {table} (id bigint, img {x_type}, label {label_type})")
        rows = [
            {"id": None if i is None else int(i), "img": img, "label": lab}
            for i, img, lab in zip(ids, images, labels, strict=True)
        ]
        conn.execute(sa.text(f"INSERT INTO {table} VALUES (:id, :img, :label)"), rows)
    return table


def _stored(db, table: str) -> list:
    with db.connect() as conn:
        return conn.execute(
            sa.text(f"SELECT __dist_key__, buffer_id, n, x, y, ids FROM {table} ORDER BY buffer_id")
        ).all()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    n = 57
    x = rng.integers(0, 256, (n, 4, 4), dtype=np.uint8)
    labels = LABELS[rng.integers(0, 3, n)]
    ids = rng.choice(10**6, n, replace=False)
    return ids, x, labels


@pytest.mark.parametrize("seed", [0, 3])
def test_pack_table_equals_load_images_of_the_same_arrays_in_id_order(db, data, seed):
    ids, x, labels = data
    shuffled = np.random.default_rng(9).permutation(len(ids))  # stored in no particular order
    source = _source(
        db,
        "smallints",
        "smallint[]",
        ids[shuffled],
        [x[i].ravel().tolist() for i in shuffled],
        labels[shuffled].tolist(),
    )
    packed = gpcnn.pack_table(
        db,
        source,
        f"{SRC}.packed",
        x_column="img",
        y_column="label",
        id_column="id",
        segments=3,
        buffer_size=7,
        seed=seed,
        replace=True,
    )
    by_id = np.argsort(ids)
    classes = sorted(set(LABELS))
    loaded = load_images(
        db,
        f"{SRC}.loaded",
        x[by_id],
        [classes.index(v) for v in labels[by_id]],
        ids=ids[by_id],
        class_names=classes,
        segments=3,
        buffer_size=7,
        seed=seed,
        replace=True,
        progress=False,
    )
    assert _stored(db, f"{SRC}.packed") == _stored(db, f"{SRC}.loaded")
    assert packed.class_names == ("cat", "dog", "eel") == loaded.class_names
    assert (packed.keys, packed.images_per_segment, packed.buffer_size) == (
        loaded.keys,
        loaded.images_per_segment,
        loaded.buffer_size,
    )
    assert packed.image_shape == (4, 4, 1) and packed.source == f"pack_table of {source}"


@pytest.mark.parametrize(
    ("x_type", "normalized"),
    [("real[]", True), ("double precision[]", False), ("integer[]", False), ("bytea", False)],
)
def test_every_image_type(db, data, x_type, normalized):
    ids, x, labels = data
    if x_type == "bytea":
        images = [x[i].tobytes() for i in range(len(x))]
    elif normalized:
        images = [(x[i].ravel() / 255.0).tolist() for i in range(len(x))]
    else:
        images = [x[i].ravel().tolist() for i in range(len(x))]
    source = _source(db, "typed", x_type, ids, images, labels.tolist())
    gpcnn.pack_table(
        db,
        source,
        f"{SRC}.typed_packed",
        x_column="img",
        y_column="label",
        id_column="id",
        normalized=normalized,
        segments=2,
        replace=True,
    )
    rx, _, rids = read_images(db, f"{SRC}.typed_packed", ids=True)
    position = {int(i): k for k, i in enumerate(ids)}
    np.testing.assert_array_equal(rx[..., 0], x[[position[int(i)] for i in rids]])


def test_labels_of_any_type_and_a_validation_table_packed_with_the_training_map(db, data):
    ids, x, _ = data
    numbers = (np.arange(len(ids)) % 3) * 10 + 5  # 5, 15, 25
    images = [x[i].ravel().tolist() for i in range(len(x))]
    train = _source(db, "numbers", "smallint[]", ids, images, numbers.tolist(), "integer")
    info = gpcnn.pack_table(
        db,
        train,
        f"{SRC}.numbers_packed",
        x_column="img",
        y_column="label",
        id_column="id",
        segments=2,
        replace=True,
    )
    assert info.class_names == ("5", "15", "25")  # numeric order, not text order
    valid = _source(
        db, "numbers_valid", "smallint[]", ids[:9], images[:9], [25, 5, 15] * 3, "integer"
    )
    gpcnn.pack_table(
        db,
        valid,
        f"{SRC}.numbers_valid_packed",
        x_column="img",
        y_column="label",
        id_column="id",
        class_values=info.class_names,
        segments=2,
        replace=True,
    )
    _, y, rids = read_images(db, f"{SRC}.numbers_valid_packed", ids=True)
    expected = {int(i): [2, 0, 1][k % 3] for k, i in enumerate(ids[:9])}
    assert [expected[int(i)] for i in rids] == y.tolist()
    with pytest.raises(TableError, match=r"label '25', not one of the class values \['5', '15'\]"):
        gpcnn.pack_table(
            db,
            valid,
            f"{SRC}.never",
            x_column="img",
            y_column="label",
            id_column="id",
            class_values=[5, 15],
        )


def _bad(db, rows, x_type="smallint[]", match="", **kw):
    ids, images, labels = zip(*rows, strict=True)
    source = _source(db, "bad", x_type, ids, images, labels)
    gpcnn.drop_table(db, f"{SRC}.never", missing_ok=True)
    with pytest.raises(TableError, match=match):
        gpcnn.pack_table(
            db,
            source,
            f"{SRC}.never",
            **{"x_column": "img", "y_column": "label", "id_column": "id", "segments": 1, **kw},
        )
    with db.connect() as conn:
        assert (
            conn.execute(sa.text("SELECT to_regclass(:t)"), {"t": f"{SRC}.never"}).scalar() is None
        )


def test_bad_rows_are_refused_by_their_id_before_anything_is_written(db):
    good = [0] * 16
    _bad(db, [(1, good, "a"), (None, good, "b")], match="1 rows have a NULL id")
    _bad(db, [(1, good, "a"), (1, good, "b")], match="id = 1 appears more than once")
    _bad(db, [(1, good, "a"), (7, None, "b")], match="id 7 has NULL images")
    _bad(db, [(1, good, "a"), (8, good, None)], match="id 8 has NULL label")
    _bad(db, [(1, good, "a"), (9, [0] * 15, "b")], match="id 9 has 15 values, expected 16")
    _bad(db, [(1, good, "a"), (4, [0] * 15 + [256], "b")], match="id 4 has values outside 0..255")
    _bad(
        db,
        [(1, [0.5] * 16, "a"), (5, [0.5] * 15 + [1.5], "b")],
        x_type="real[]",
        normalized=True,
        match="id 5 has values outside 0..1",
    )
    _bad(db, [(1, good, "a"), (6, [0] * 15 + [None], "b")], match="id 6 has values outside")
    _bad(
        db,
        [(1, [0.5] * 16, "a"), (3, [0.5] * 15 + [float("nan")], "b")],
        x_type="real[]",
        normalized=True,
        match="id 3 has values outside 0..1",
    )
    _bad(db, [(1, [0] * 10, "a"), (2, [0] * 10, "b")], match="not square: give shape")
    _bad(db, [(1, good, "a")], match="'pixels' is not a column", x_column="pixels")
    _bad(db, [(1, good, "a")], x_type="text", match="images must be one of")
    _bad(db, [(1, [0] * 12, "a"), (2, [0] * 12, "b")], match="shape must be", shape=(2, 2, 2, 2))


def test_the_range_is_refused_before_what_is_checked_after_it_and_by_the_first_row(db):
    over = [300] * 16
    rows = [(i, [0] * 16 if i < 50 else over, "a") for i in range(60, 0, -1)]
    _bad(db, rows, match="id 50 has values outside", segments=3, buffer_size=4)
    _bad(db, [(2, over, "a"), (3, over, "z")], match="id 2 has values", class_values=["a"])
    _bad(db, [(2, over, "a"), (3, over, "b")], match="id 2 has values", segments=5)


def test_a_given_shape_and_rgb(db):
    x = np.arange(2 * 2 * 3 * 3, dtype=np.uint8).reshape(3, 2, 2, 3)
    source = _source(
        db, "rgb", "smallint[]", [10, 11, 12], [i.ravel().tolist() for i in x], ["a", "b", "a"]
    )
    gpcnn.pack_table(
        db,
        source,
        f"{SRC}.rgb_packed",
        x_column="img",
        y_column="label",
        id_column="id",
        shape=(2, 2, 3),
        segments=1,
        replace=True,
    )
    info = describe(db, f"{SRC}.rgb_packed")
    assert info.image_shape == (2, 2, 3) and info.num_classes == 2
    rx, _, rids = read_images(db, f"{SRC}.rgb_packed", ids=True)
    np.testing.assert_array_equal(rx, x[[int(i) - 10 for i in rids]])
