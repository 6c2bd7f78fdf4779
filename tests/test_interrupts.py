"""Ctrl-C during a call: SIGINT sent to a child process while its fit, evaluate,
predict(output_table=) or load_images runs in the database. Every server process working for it
stops (waited for, up to a bound no load reaches), nothing it made is left (transfers, staging or
half-written tables), the exception that reaches the user is the KeyboardInterrupt, nothing else is
printed, and an interrupted run is stored as ``interrupted`` with its whole iterations and
resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from tiny import dense_net

from gpcnn.data.tables import TableName, drop_table, load_images
from gpcnn.estimator import GreenplumCNN
from gpcnn.fit import runs

pytestmark = pytest.mark.slow  # each test starts a client process and its segments

DATA_SCHEMA = "gpcnn_interrupts_test"
TABLE = f"{DATA_SCHEMA}.train"
CHILD = Path(__file__).parent / "children" / "interrupted.py"
# Seconds from SIGINT until no server process works for the child: an outer bound that a loaded
# machine cannot break (a statement stops within about a buffer's training; it once took 5.03 s
# on a busy live Greenplum). What is checked is that they stop, not how fast.
STOPPED_WITHIN = 60.0


@pytest.fixture(scope="module")
def table(db):
    """2 segments of 600 images: with batch_size=2, an iteration lasts about a second. A cancel
    takes effect between buffers, so buffers of 50 (25 steps) keep the wait for one short on a
    loaded machine."""
    rng = np.random.default_rng(5)
    images = rng.integers(0, 255, (1200, 8, 8), dtype=np.uint8)
    labels = rng.integers(0, 3, 1200)
    load_images(db, TABLE, images, labels, segments=2, buffer_size=50, replace=True, progress=False)
    return TABLE


@pytest.fixture(scope="module")
def many_buffers(db):
    """20,000 images in buffers of 10: evaluating or predicting it lasts seconds."""
    rng = np.random.default_rng(6)
    images = rng.integers(0, 255, (20_000, 8, 8), dtype=np.uint8)
    labels = rng.integers(0, 3, 20_000)
    name = f"{DATA_SCHEMA}.many_buffers"
    load_images(db, name, images, labels, segments=2, buffer_size=10, replace=True, progress=False)
    return name


class Child:
    """The child process and what it printed to stderr so far."""

    def __init__(self, db, table: str, stderr: Path) -> None:
        url = db.url.render_as_string(hide_password=False)
        self.stderr_path = stderr
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), url, db.schema, table],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr.open("w"),
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
        )
        assert self.process.stdout.readline().strip() == "ready", self.stderr()

    @property
    def application_name(self) -> str:
        return f"gpcnn/{self.process.pid}"

    def send(self, **command) -> None:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def result(self) -> dict:
        line = self.process.stdout.readline()
        assert line, self.stderr()
        return json.loads(line)

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def close(self) -> None:
        """Ends the child; one a failed test left mid-call is killed rather than waited for."""
        self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def child(db, table, tmp_path):
    """A child of its own per test: one that failed mid-call never feeds its output to the next."""
    started = Child(db, table, tmp_path / "stderr.txt")
    yield started
    started.close()


def _active(db, child: Child, like: str = "%") -> list[int]:
    """The child's server processes running a statement (``like`` its text)."""
    with db.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = :name "
                    "AND state = 'active' AND query LIKE :like"
                ),
                {"name": child.application_name, "like": like},
            ).scalars()
        )


def _count(db, sql: str, **params) -> int:
    with db.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar()


def _exists(db, table: str) -> bool:
    """Whether the schema-qualified table exists (other tests leave tables of the same name)."""
    return _count(db, "SELECT count(*) FROM pg_class WHERE oid = to_regclass(:t)", t=table) > 0


def _leftovers(db) -> dict:
    """What an interrupted call may leave: transfer rows and staging tables."""
    return {
        "transfers": _count(db, f"SELECT count(*) FROM {db.backend.qschema}.transfers"),
        "staging": _count(
            db, "SELECT count(*) FROM pg_class WHERE relname LIKE '%\\_\\_gpcnn\\_staging%'"
        ),
    }


def _interrupted(db, child: Child, ready, warm: bool = False, timeout: float = 120) -> dict:
    """SIGINT once ``ready()`` (after the child's sessions are ``warm``, if it warms them);
    checks that the child's server processes stop (``STOPPED_WITHIN``) and that nothing reached
    stderr.
    Returns the child's report."""
    printed = len(child.stderr())
    if warm:
        assert child.process.stdout.readline().strip() == "warm", child.stderr()
    deadline = time.monotonic() + timeout
    while not ready():
        assert child.process.poll() is None and time.monotonic() < deadline, child.stderr()
        time.sleep(0.02)
    child.process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    while working := _active(db, child):
        waited = time.monotonic() - sent
        assert waited < STOPPED_WITHIN, f"{working} still active {waited:.2f} s after SIGINT"
        time.sleep(0.05)
    result = child.result()
    assert result["raised"] == "KeyboardInterrupt", result
    extra = child.stderr()[printed:]
    assert "Traceback" not in extra and "Exception ignored" not in extra, extra
    return result


def _newest_run(db) -> runs.StoredRun | None:
    found = [r for r in runs.list_runs(db) if r["table"] == TABLE]
    return runs.load_run(db, found[-1]["run_id"]) if found else None


def test_ctrl_c_during_a_fit_stops_its_segments_and_the_interrupted_run_resumes(db, child):
    before = _leftovers(db)
    known = _newest_run(db)
    known_id = None if known is None else known.run_id

    def training():
        run = _newest_run(db)
        return (
            run is not None
            and run.run_id != known_id
            and run.iterations
            and _active(db, child, "%.train(%")
        )

    child.send(call="fit", iterations=30)
    result = _interrupted(db, child, training)
    assert _leftovers(db) == before
    run = runs.load_run(db, result["run_id"])
    assert run.status == "interrupted"
    stored = [row["iteration"] for row in run.iterations]
    assert stored == result["history"] == list(range(1, len(stored) + 1))
    assert runs.list_runs(db, [run.run_id])[0]["error"].startswith("KeyboardInterrupt")
    same = GreenplumCNN(dense_net(), iterations=30, batch_size=2, seed=1, threads_per_segment=1)
    assert runs.find_unfinished(db, TABLE, same.stored_params()) == run.run_id

    total = len(stored) + 1
    child.send(call="fit", iterations=total, resume=run.run_id)
    resumed = child.result()
    assert resumed["raised"] is None, resumed
    assert resumed["history"] == list(range(1, total + 1))
    assert runs.load_run(db, run.run_id).status == "finished"
    runs.delete_runs(db, [run.run_id])


def test_ctrl_c_during_evaluate_stops_its_segments(db, child, many_buffers):
    before = _leftovers(db)
    child.send(call="evaluate", table=many_buffers)
    _interrupted(db, child, lambda: _active(db, child, "%evaluate(%"), warm=True)
    assert _leftovers(db) == before


def test_ctrl_c_during_a_prediction_into_a_table_leaves_no_table(db, child, many_buffers):
    before = _leftovers(db)
    output = f"{DATA_SCHEMA}.predicted"
    with db.begin() as conn:  # what a run that failed here made
        conn.exec_driver_sql(db.backend.drop_ddl(TableName.parse(output), if_exists=True))
    child.send(call="predict", table=many_buffers, output=output)
    _interrupted(db, child, lambda: _active(db, child, "INSERT INTO%"), warm=True)
    assert _leftovers(db) == before
    assert not _exists(db, output)


def test_ctrl_c_during_a_load_leaves_no_table_and_no_catalog_row(db, child):
    before = _leftovers(db)
    output = f"{DATA_SCHEMA}.loaded"
    drop_table(db, output, missing_ok=True)  # what a run that failed here made
    child.send(call="load", output=output, images=1_500_000)
    _interrupted(db, child, lambda: _active(db, child, "COPY%"))
    assert _leftovers(db) == before
    assert not _exists(db, output)
    catalog = f"{db.backend.qschema}.image_tables"
    rows = f"SELECT count(*) FROM {catalog} WHERE table_schema = :s AND table_name = 'loaded'"
    assert _count(db, rows, s=DATA_SCHEMA) == 0
