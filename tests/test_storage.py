"""Storage that stays bounded without anyone running VACUUM: what retention discards is reclaimed
by the fit itself, ``runs delete`` frees a run's space at once, and the transfers of a killed
client are swept at the next fit or install."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import sqlalchemy as sa
from conftest import TEST_SCHEMA, database_url
from test_training import estimator

import gpcnn
from gpcnn.data.tables import load_images
from gpcnn.engines import migrations, shapes
from gpcnn.engines.catalog import Catalog, reclaim
from gpcnn.engines.transfers import EVERY_KEY, write_transfer
from gpcnn.fit import runs
from gpcnn.kernel import keras_setup

keras = keras_setup.keras_module()

CHUNK_BYTES = 64 << 10
DATA_SCHEMA = "gpcnn_storage_test"


def dense_model():
    """About 130k weights (0.5 MB): 8 chunks of 64 KB, stored out of line."""
    keras.utils.set_random_seed(3)
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(2000, activation="relu"),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )


def on_disk(db, names=("checkpoints", "transfers")) -> int:
    """Bytes on disk of gpcnn's tables (with TOAST, indexes, free space maps)."""
    with db.connect() as conn:
        return sum(
            conn.execute(
                sa.select(sa.func.pg_total_relation_size(shapes.qualified(db.backend, name)))
            ).scalar()
            for name in names
        )


def test_many_iterations_grow_the_chunk_tables_by_at_most_three_times_the_runs_bytes(db):
    chunked = gpcnn.connect(database_url(), schema=TEST_SCHEMA, chunk_bytes=CHUNK_BYTES)
    rng = np.random.default_rng(4)
    name = f"{DATA_SCHEMA}.dense"
    load_images(
        chunked,
        name,
        rng.integers(0, 255, (40, 8, 8), dtype=np.uint8),
        rng.integers(0, 3, 40),
        segments=2,
        buffer_size=20,
        replace=True,
        progress=False,
    )
    reclaim(chunked.backend)  # what earlier tests deleted is free space from here on
    before = on_disk(chunked)
    est = estimator(chunked, TEST_SCHEMA, dense_model(), iterations=24)
    with est:
        est.fit(name)
    stored = runs.show_run(chunked, est.run_id_)["stored_bytes"]
    assert stored >= 3 * 4 * dense_model().count_params()  # 10, 20, 24 (and the best)
    # 24 checkpoints written, all but 3 or 4 deleted: without reclaiming, 8x the live bytes
    assert on_disk(chunked) - before <= 3 * stored, (on_disk(chunked) - before, stored)
    runs.delete_runs(chunked, [est.run_id_])
    chunked.close()


def test_deleting_a_run_gives_its_space_back_at_once(db):
    schema = "gpcnn_storage_delete_test"
    own_schema = gpcnn.connect(database_url(), schema=schema, chunk_bytes=CHUNK_BYTES)
    model = np.arange(100_000, dtype="<f4")  # 400 kB: 7 chunks, out of line
    with own_schema.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema}, {schema}_staging CASCADE")
        catalog = Catalog(conn, own_schema.backend)
        catalog.ensure_tables()
        kept, deleted = (catalog.create_run("t", {}, "{}") for _ in range(2))
        for run_id in (kept, deleted):
            for iteration in range(1, 6):
                catalog.store_checkpoint(run_id, iteration, {"weights": model})
    full = on_disk(own_schema, ("checkpoints",))
    assert runs.delete_runs(own_schema, [deleted]) == 1
    assert full - on_disk(own_schema, ("checkpoints",)) >= 5 * model.nbytes * 0.9
    with own_schema.begin() as conn:
        assert (
            Catalog(conn, own_schema.backend).checkpoint(kept, 5)["weights"].tolist()
            == model.tolist()
        )
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema}, {schema}_staging CASCADE")
    own_schema.close()


def _alive(db, name: str) -> bool:
    with db.connect() as conn:
        return bool(
            conn.execute(
                sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :n"),
                {"n": name},
            ).scalar()
        )


def _transfer_ids(db) -> set[int]:
    with db.connect() as conn:
        found = conn.execute(sa.text(f"SELECT DISTINCT transfer_id FROM {TEST_SCHEMA}.transfers"))
        return {int(t) for t in found.scalars()}


def test_a_sigkilled_clients_transfer_is_swept_at_the_next_fit_and_a_live_ones_is_kept(db):
    child = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).parent / "children" / "transfer.py"),
            database_url() or "",
            TEST_SCHEMA,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},  # this gpcnn
    )
    try:
        line = child.stdout.readline().strip()
        assert line.isdigit(), child.stderr.read()[-3000:]
        theirs = int(line)
        ours = write_transfer(db.backend, {EVERY_KEY: np.zeros(4, dtype="<f4")})
        with db.begin() as conn:
            Catalog(conn, db.backend).ensure_tables()  # what every fit and install runs first
        assert {theirs, ours} <= _transfer_ids(db)  # both owners alive
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        child.kill()
    deadline = time.monotonic() + 60
    while _alive(db, f"gpcnn/{child.pid}") and time.monotonic() < deadline:
        time.sleep(0.2)  # the server notices the closed socket
    with db.begin() as conn:
        Catalog(conn, db.backend).ensure_tables()
    found = _transfer_ids(db)
    assert theirs not in found and ours in found
    with db.begin() as conn:
        conn.execute(
            sa.text(f"DELETE FROM {TEST_SCHEMA}.transfers WHERE transfer_id = :t"), {"t": ours}
        )


def test_shape_5_transfers_gain_an_owner_and_ownerless_old_ones_are_swept(db):
    schema = "gpcnn_migration_5_test"
    shape_5 = gpcnn.connect(database_url(), schema=schema)
    transfers = f"{schema}.transfers"
    with shape_5.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema}, {schema}_staging CASCADE")
        Catalog(conn, shape_5.backend).ensure_tables()
        conn.exec_driver_sql(f"ALTER TABLE {transfers} DROP COLUMN owner, DROP COLUMN created_at")
        conn.exec_driver_sql(f"UPDATE {schema}.schema_version SET version = 5")
        conn.exec_driver_sql(
            f"INSERT INTO {transfers} (transfer_id, __dist_key__, chunk, data) "
            "VALUES (1, -1, 0, '\\x00'), (2, -1, 0, '\\x00')"
        )
    with shape_5.begin() as conn:
        Catalog(conn, shape_5.backend).ensure_tables()
        assert Catalog(conn, shape_5.backend).shape() == migrations.SHAPE_VERSION == 10
        owners = conn.exec_driver_sql(f"SELECT DISTINCT owner FROM {transfers}").scalars().all()
        assert owners == [""]  # kept: who wrote them is not known
        conn.exec_driver_sql(
            f"UPDATE {transfers} SET created_at = now() - interval '2 days' WHERE transfer_id = 1"
        )
    with shape_5.begin() as conn:
        Catalog(conn, shape_5.backend).ensure_tables()
        left = conn.exec_driver_sql(f"SELECT transfer_id FROM {transfers}").scalars().all()
        assert left == [2]
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema}, {schema}_staging CASCADE")
    shape_5.close()
