"""gpcnn replaces only what gpcnn made: every function and command that writes a table, given the
name of a table of the user's own with ``replace=True`` (``--replace``), refuses with an error that
names the table and says why, and every row of it survives; without ``replace`` the refusal offers
to reload only gpcnn's own tables."""

from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy as sa
from tiny import dense_net, image_rows, packed

import gpcnn
from gpcnn.data.tables import TableError
from gpcnn.tools import cli

DATA = "gpcnn_own_tables_test"
ROWS = [(1, "a"), (2, "b"), (3, "c")]


@pytest.fixture(scope="module")
def image_table(db):
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 255, (60, 8, 8), dtype=np.uint8), rng.integers(0, 3, 60)
    return str(
        gpcnn.load_images(
            db, f"{DATA}.images", x, y, segments=2, replace=True, progress=False
        ).table
    )


@pytest.fixture
def users_table(db, request):
    """A plain table of three rows, made by the user, not by gpcnn."""
    name = f"{DATA}.mine_{abs(hash(request.node.name)) % 10**8}"
    plain_table(db, name)
    yield name
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")


def plain_table(db, name: str) -> None:
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")
        conn.exec_driver_sql(f"CREATE TABLE {name} (id integer, label text)")
        conn.exec_driver_sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b'), (3, 'c')")


def rows(db, name: str) -> list[tuple]:
    with db.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT id, label FROM {name} ORDER BY id")]


def images():
    rng = np.random.default_rng(1)
    return rng.integers(0, 255, (40, 8, 8), dtype=np.uint8), rng.integers(0, 3, 40)


def fitted(db, table):
    return gpcnn.GreenplumCNN(
        dense_net(), iterations=1, seed=0, database=db, threads_per_segment=1, verbose=0
    ).fit(table)


WRITERS = {
    "load_images": lambda db, t, src: gpcnn.load_images(
        db, t, *images(), segments=2, replace=True, progress=False
    ),
    "pack_table": lambda db, t, src: packed(db, f"{DATA}.source_rows", t),
    "redeal": lambda db, t, src: gpcnn.redeal(db, src, t, segments=2, replace=True),
    "add_shared_sample": lambda db, t, src: gpcnn.add_shared_sample(db, src, t, 0.1, replace=True),
    "estimator predict": lambda db, t, src: fitted(db, src).predict(
        src, output_table=t, replace=True
    ),
    "gpcnn.predict": lambda db, t, src: gpcnn.predict(
        db, dense_net(), src, output_table=t, replace=True
    ),
}


@pytest.fixture(scope="module")
def source_rows(db):
    with db.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {DATA}")
    image_rows(db, f"{DATA}.source_rows", *images())


@pytest.mark.parametrize("writer", list(WRITERS))
def test_replace_refuses_a_table_gpcnn_did_not_make_and_keeps_every_row(
    db, image_table, source_rows, users_table, writer
):
    with pytest.raises(TableError) as refused:
        WRITERS[writer](db, users_table, image_table)
    message = str(refused.value)
    assert users_table in message and "gpcnn replaces only tables it made" in message
    assert rows(db, users_table) == ROWS


def test_the_load_command_refuses_before_loading_anything(db, capsys):
    base = f"{DATA}.cmdload"
    plain_table(db, f"{base}_test")
    try:
        argv = ["load", "--dataset", "mnist-sample", "--table", base, "--replace", "--quiet"]
        assert (
            cli.main(
                [
                    *argv,
                    "--database",
                    db.url.render_as_string(hide_password=False),
                    "--schema",
                    db.schema,
                ]
            )
            == 1
        )
        err = capsys.readouterr().err
        assert f"{base}_test" in err and "gpcnn replaces only tables it made" in err
        assert rows(db, f"{base}_test") == ROWS
        with db.connect() as conn:
            train = conn.execute(sa.text("SELECT to_regclass(:t)"), {"t": f"{base}_train"}).scalar()
        assert train is None  # the train split was not loaded first
    finally:
        with db.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {base}_test")


def test_without_replace_only_gpcnns_own_tables_are_offered_a_reload(db, image_table, users_table):
    with pytest.raises(TableError) as own:
        gpcnn.load_images(db, image_table, *images(), segments=2, progress=False)
    assert "pass replace=True (or --replace) to reload it" in str(own.value)
    with pytest.raises(TableError) as users:
        gpcnn.load_images(db, users_table, *images(), segments=2, progress=False)
    assert "reload" not in str(users.value) and "gpcnn replaces only tables it made" in str(
        users.value
    )
    assert rows(db, users_table) == ROWS


def test_predictions_replace_the_predictions_gpcnn_wrote(db, image_table):
    output = f"{DATA}.predicted"
    est = fitted(db, image_table)
    est.predict(image_table, output_table=output, replace=True)
    est.predict(image_table, output_table=output, replace=True)
    with pytest.raises(TableError, match="pass replace=True to overwrite the predictions"):
        est.predict(image_table, output_table=output)


def test_tables_list_shows_the_predictions_tables_gpcnn_wrote_until_they_are_dropped(
    db, image_table, capsys
):
    out = f"{DATA}.listed_predictions"
    gpcnn.predict(db, dense_net(), image_table, output_table=out, replace=True)
    base = ["--database", db.url.render_as_string(hide_password=False), "--schema", db.schema]
    assert cli.main(["tables", "list", *base]) == 0
    assert f"{out}  predictions of {image_table}\n" in capsys.readouterr().out
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {out}")  # by hand: its catalog row stays behind
    assert cli.main(["tables", "list", *base]) == 0
    assert out not in capsys.readouterr().out
