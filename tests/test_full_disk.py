"""A full disk: a tablespace on a small tmpfs that the test mounts
holds gpcnn's checkpoints, or a load's table. A checkpoint that does not fit fails the fit with the
server's "No space left on device" and the file, the previous iteration stays whole and resumes
once space is freed; a load that does not fit leaves no table and no catalog row. Needs root and
the embedded server on this machine (skipped otherwise, with the reason)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import conftest
import numpy as np
import pytest
import sqlalchemy as sa

import gpcnn
from gpcnn.data.tables import load_images
from gpcnn.estimator import GreenplumCNN, TrainingError
from gpcnn.fit import runs
from gpcnn.kernel import keras_setup
from gpcnn.tools import os_user

keras = keras_setup.keras_module()
SCHEMA = "gpcnn_disk_test"  # gpcnn's own tables, installed here so they can move
TABLE = f"{SCHEMA}_data.train"
SPACE = "gpcnn_small_disk"
SIZE = "8m"


def _mount(path: Path) -> str | None:
    """Mount a small tmpfs owned by the server's OS user; why not, if it cannot."""
    if conftest.database_url() is not None:
        return "the server is not the embedded one on this machine"
    if os.geteuid() != 0:
        return "mounting a small file system needs root"
    try:  # as root the embedded server runs as its own OS user ($GPCNN_SERVER_USER in CI)
        uid = pwd.getpwnam(os_user.server_user()).pw_uid
    except KeyError:
        return f"no OS user {os_user.server_user()!r} runs the server"
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE},uid={uid},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    return None if done.returncode == 0 else f"cannot mount a tmpfs: {done.stderr.strip()}"


@pytest.fixture(scope="module")
def disk(db):
    """The mount point, its tablespace, and gpcnn installed in SCHEMA with its checkpoints there."""
    path = Path(tempfile.mkdtemp(prefix="gpcnn-disk-")) / "mnt"  # the server's user gets in
    path.parent.chmod(0o755)
    why = _mount(path)
    if why:
        pytest.skip(why)
    space = path / "pg"
    space.mkdir()
    shutil.chown(space, os_user.server_user())
    admin = sa.create_engine(db.url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    db = gpcnn.connect(conftest.database_url(), schema=SCHEMA)
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE TABLESPACE {SPACE} LOCATION '{space}'")
        gpcnn.install(db)
        with db.begin() as conn:
            conn.exec_driver_sql(f"ALTER TABLE {SCHEMA}.checkpoints SET TABLESPACE {SPACE}")
        yield path, db
    finally:
        gpcnn.uninstall(db)
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {SCHEMA}_data CASCADE")
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
            conn.exec_driver_sql(f"DROP TABLESPACE IF EXISTS {SPACE}")
        admin.dispose()
        subprocess.run(["umount", str(path)], check=False)
        shutil.rmtree(path.parent, ignore_errors=True)


def _fill(path: Path) -> Path:
    """A file that takes every free byte of the mount."""
    filler = path / "filler"
    with filler.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


class FillAfterFirst(keras.callbacks.Callback):
    """Fills the disk once iteration 1 is stored: iteration 2's checkpoint cannot be written."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path, self.filler = path, None

    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0:
            self.filler = _fill(self.path)


def _model():
    keras.utils.set_random_seed(7)
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(512),  # 35,000 weights: a checkpoint of 140 kB
            keras.layers.Dense(3, "softmax"),
        ]
    )


def test_a_checkpoint_on_a_full_disk_fails_the_fit_and_the_run_resumes_once_space_is_freed(disk):
    path, db = disk
    rng = np.random.default_rng(1)
    images, labels = rng.integers(0, 255, (200, 8, 8), dtype=np.uint8), rng.integers(0, 3, 200)
    load_images(db, TABLE, images, labels, segments=2, replace=True, progress=False)
    params = dict(iterations=3, seed=1, database=db, threads_per_segment=1, verbose=0)
    filling = FillAfterFirst(path)
    est = GreenplumCNN(_model(), **params)
    with pytest.raises(TrainingError) as raised:
        est.fit(TABLE, callbacks=[filling])
    message = str(raised.value)
    assert "No space left on device" in message and "pg_tblspc/" in message, message
    assert "the server's disk is full where that file lies" in message
    assert f"run {est.run_id_} keeps iteration 1: fit(table, resume=" in message
    stored = runs.load_run(db, est.run_id_)
    assert stored.status == "failed" and [r["iteration"] for r in stored.iterations] == [1]

    filling.filler.unlink()
    resumed = GreenplumCNN(_model(), **params).fit(TABLE, resume=est.run_id_)
    assert [r["iteration"] for r in resumed.history_] == [1, 2, 3]
    assert runs.load_run(db, est.run_id_).status == "finished"


def test_a_load_on_a_full_disk_leaves_no_table_and_no_catalog_row(disk):
    db = disk[1]
    url = db.url.update_query_dict({"options": f"-c default_tablespace={SPACE}"})
    big = f"{SCHEMA}_data.too_big"
    rng = np.random.default_rng(2)
    images = rng.integers(0, 255, (200_000, 8, 8), dtype=np.uint8)  # 13 MB, on 8 MB
    small = gpcnn.connect(url.render_as_string(hide_password=False), schema=SCHEMA)
    with small, pytest.raises(Exception, match="No space left on device"):
        load_images(small, big, images, rng.integers(0, 3, 200_000), progress=False)
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT to_regclass(:t)"), {"t": big}).scalar() is None
        rows = conn.execute(
            sa.text(f"SELECT count(*) FROM {SCHEMA}.image_tables WHERE table_name = 'too_big'")
        ).scalar()
    assert rows == 0
