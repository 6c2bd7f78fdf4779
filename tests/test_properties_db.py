"""Properties that need the server, few examples each (the profile ``gpcnn`` of conftest.py:
seeded): ``pack_table`` of any label set, and what the name properties found in it."""

from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

import gpcnn
from gpcnn.data.tables import TableError, read_images

SRC = "gpcnn_properties_test"
WORDS = st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=4)  # one order in any collation


def _source(db, label_type: str, labels: list) -> str:
    table = f"{SRC}.labels"
    with db.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {SRC}")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        conn.exec_driver_sql(
            f"CREATE TABLE {table} (id bigint, img smallint[], label {label_type})"
        )
        rows = [{"id": 10 * i + 3, "img": [i % 256], "label": v} for i, v in enumerate(labels)]
        conn.execute(sa.text(f"INSERT INTO {table} VALUES (:id, :img, :label)"), rows)
    return table


@settings(max_examples=40)
@given(
    st.one_of(
        st.tuples(
            st.just("integer"), st.lists(st.integers(-(2**31), 2**31 - 1), min_size=2, max_size=9)
        ),
        st.tuples(st.just("text"), st.lists(WORDS, min_size=2, max_size=9)),
    )
)
def test_packed_class_values_are_the_sorted_distinct_labels_and_each_image_gets_its_labels_index(
    db, typed_labels
):
    label_type, labels = typed_labels
    source = _source(db, label_type, labels)
    packed = gpcnn.pack_table(
        db,
        source,
        f"{SRC}.packed",
        x_column="img",
        y_column="label",
        id_column="id",
        segments=2,
        seed=1,
        replace=True,
    )
    classes = sorted(set(labels))
    assert packed.class_names == tuple(str(v) for v in classes)
    assert packed.num_classes == len(classes)
    _, y, ids = read_images(db, packed.table, ids=True)
    expected = {10 * i + 3: classes.index(v) for i, v in enumerate(labels)}
    assert sorted(ids.tolist()) == sorted(expected)
    assert y.tolist() == [expected[i] for i in ids.tolist()]
    assert y.dtype == np.int32


def test_a_column_whose_name_holds_a_percent_sign_is_refused_by_name(db):
    # Found by the name properties: psycopg2's dialect doubles a % as it quotes, and some
    # statements undo it, others not, so the statements named a column "a%%b" that is not there.
    with db.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {SRC}")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {SRC}.percent")
        conn.exec_driver_sql(f'CREATE TABLE {SRC}.percent (id bigint, "a%%b" smallint[], y int)')
    with pytest.raises(TableError, match=r"x_column='a%b': gpcnn cannot name a column holding '%'"):
        gpcnn.pack_table(
            db, f"{SRC}.percent", f"{SRC}.packed", x_column="a%b", y_column="y", id_column="id"
        )
