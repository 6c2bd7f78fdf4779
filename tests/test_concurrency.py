"""Concurrency: fits at once from several processes, on the same table and on another,
each end with the result it has alone; loads racing for one table name (or one new schema) end
as exactly one load each, with a clear error for the loser and no debris."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from processes import run_together
from tiny import dense_net

import gpcnn
from gpcnn.data.tables import STAGING_SUFFIX, TableError, describe, load_images, read_images
from gpcnn.fit import runs
from gpcnn.kernel import wire

DATA = "gpcnn_concurrency_test"
CHILD = [str(Path(__file__).parent / "children" / "fit.py")]


def estimator(db) -> gpcnn.GreenplumCNN:
    """The fit every process runs (deterministic: seeds, one TF thread per segment)."""
    model = dense_net()
    return gpcnn.GreenplumCNN(
        model, iterations=2, seed=3, database=db, threads_per_segment=1, verbose=0
    )


def images(seed: int, n: int, label: int | None = None):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n) if label is None else np.full(n, label)
    return rng.integers(0, 255, (n, 8, 8), dtype=np.uint8), labels


@pytest.fixture(scope="module")
def tables(db):
    names = [f"{DATA}.first", f"{DATA}.second"]
    for seed, name in enumerate(names):
        load_images(db, name, *images(seed, 120), segments=2, replace=True, progress=False)
    return names


@pytest.mark.slow
def test_fits_at_once_from_three_processes_equal_each_fit_alone(db, tables, tmp_path):
    alone = {}
    for name in tables:
        alone[name] = wire.flatten(estimator(db).fit(name).model_.get_weights())
    assert np.abs(alone[tables[0]] - alone[tables[1]]).max() > 1e-3  # the tables differ

    url = db.url.render_as_string(hide_password=False)
    jobs = [tables[0], tables[0], tables[1]]  # two on the same table, one on another
    reports = run_together(
        [
            [*CHILD, url, db.schema, name, str(tmp_path / f"{i}.npy"), f"{__name__}:estimator"]
            for i, name in enumerate(jobs)
        ]
    )
    assert len({r["run_id"] for r in reports}) == 3
    for i, (name, report) in enumerate(zip(jobs, reports, strict=True)):
        np.testing.assert_array_equal(np.load(tmp_path / f"{i}.npy"), alone[name])
        stored = runs.load_run(db, report["run_id"])
        assert (stored.status, len(stored.iterations), stored.table) == ("finished", 2, name)


def _race(loads) -> list[BaseException | None]:
    """Run the loads (callables) at the same moment, each in its own thread and connection."""
    barrier = threading.Barrier(len(loads))
    outcomes: list[BaseException | None] = [None] * len(loads)

    def run(i, load):
        barrier.wait()
        try:
            load()
        except BaseException as e:
            outcomes[i] = e

    threads = [threading.Thread(target=run, args=(i, f)) for i, f in enumerate(loads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return outcomes


def _debris(db, schema: str) -> list[str]:
    with db.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = :s AND strpos(c.relname, :staging) > 0"
                ),
                {"s": schema, "staging": STAGING_SUFFIX},
            ).scalars()
        )


def test_loads_racing_for_one_name_end_as_exactly_one_of_them(db):
    schema = f"{DATA}_race"
    name = f"{schema}.target"
    gpcnn.drop_table(db, name, missing_ok=True)
    first, second = images(10, 60, label=0), images(11, 90, label=1)

    def load(data, **options):
        return lambda: load_images(
            db, name, *data, segments=2, num_classes=3, progress=False, **options
        )

    outcomes = _race([load(first), load(second)])
    errors = [e for e in outcomes if e is not None]
    assert len(errors) == 1 and isinstance(errors[0], TableError), outcomes
    assert "exists: pass replace=True" in str(errors[0])
    winner = first if outcomes[1] is not None else second
    np.testing.assert_array_equal(np.sort(read_images(db, name)[1]), np.sort(winner[1]))

    for _ in range(3):
        assert _race([load(first, replace=True), load(second, replace=True)]) == [None, None]
        x, y = read_images(db, name)
        info = describe(db, name)
        expected = first if len(y) == len(first[1]) else second  # one of the two, whole
        np.testing.assert_array_equal(np.sort(y), np.sort(expected[1]))
        assert sorted(map(bytes, x)) == sorted(map(bytes, expected[0][..., np.newaxis]))
        assert info.images == len(y) and sum(info.images_per_segment) == len(y)
    assert _debris(db, schema) == []


def test_loads_of_two_tables_into_one_new_schema_both_succeed(db):
    schema = f"{DATA}_fresh"
    for name in ("a", "b"):
        gpcnn.drop_table(db, f"{schema}.{name}", missing_ok=True)
    with db.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema}")
    loads = [
        lambda name=name: load_images(
            db, f"{schema}.{name}", *images(12, 40), segments=2, progress=False
        )
        for name in ("a", "b")
    ]
    assert _race(loads) == [None, None]
    assert [describe(db, f"{schema}.{n}").images for n in ("a", "b")] == [40, 40]
    assert _debris(db, schema) == []
