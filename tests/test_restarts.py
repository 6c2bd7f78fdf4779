"""Restarts: the server restarts while a fit is between iterations (its training done,
its row not yet stored), or the client process is SIGKILLed mid-iteration; nothing stored is
half-written, the running fit raises TrainingError, and ``fit(resume=...)`` then finishes.

On a private cluster of their own (restarting the shared one would break the other tests)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from threads import started
from tiny import dense_net

import gpcnn
from gpcnn.data.tables import load_images
from gpcnn.fit import runs
from gpcnn.kernel import wire
from gpcnn.tools import embedded

pytestmark = [
    pytest.mark.db,
    pytest.mark.skipif(
        bool(os.environ.get("GPCNN_TEST_DATABASE_URL")),
        reason="restarts need a private embedded cluster; GPCNN_TEST_DATABASE_URL names a server "
        "these tests must not restart",
    ),
    pytest.mark.skipif(
        not Path(f"/usr/lib/postgresql/{embedded.PG_MAJOR}/bin/pg_ctl").exists(),
        reason="PostgreSQL server programs not installed",
    ),
]

SCHEMA = "gpcnn_restarts"
TABLE = "restarts.train"
ITERATIONS = 4


@pytest.fixture(scope="module")
def cluster():
    # Not under /tmp/pytest-of-root: that is 0700 and the server's OS user could not enter it.
    home = Path(tempfile.mkdtemp(prefix="gpcnn-restarts-", dir="/var/tmp"))
    os.chmod(home, 0o755)
    c = embedded.Cluster(home=home / "cluster", user=embedded.cluster().user)
    embedded.start(c)
    yield c
    embedded.stop(c)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def db(cluster):
    handle = gpcnn.connect(cluster.url(), schema=SCHEMA)
    gpcnn.install(handle)
    rng = np.random.default_rng(2)
    images = rng.integers(0, 255, (2400, 8, 8), dtype=np.uint8)
    load_images(handle, TABLE, images, rng.integers(0, 3, 2400), segments=2, progress=False)
    yield handle
    handle.close()


def estimator(db, iterations: int = ITERATIONS) -> gpcnn.GreenplumCNN:
    """batch_size=2 on 1,200 images per segment: an iteration lasts seconds."""
    model = dense_net()
    return gpcnn.GreenplumCNN(
        model,
        iterations=iterations,
        batch_size=2,
        seed=0,
        database=db,
        threads_per_segment=1,
        verbose=0,
    )


def _wait(condition, what: str, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)
    return found


def _activity(db, condition: str, **params) -> int:
    """How many server processes match; a new transaction each time (pg_stat_activity is a
    snapshot per transaction)."""
    with db.connect() as conn:
        query = (
            f"SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND {condition}"
        )
        return conn.execute(sa.text(query), params).scalar()


def _stored(db, run_id: int) -> list[int]:
    return [r["iteration"] for r in runs.load_run(db, run_id).iterations]


def _intact(db, run_id: int, iterations: int) -> None:
    """Iterations 1..n stored whole: each with its metrics and a model of the full size."""
    stored = runs.load_run(db, run_id)
    assert [r["iteration"] for r in stored.iterations] == list(range(1, iterations + 1))
    size = wire.WIRE_DTYPE.itemsize * sum(wire.sizes(wire.manifest(estimator(db).model)))
    with db.connect() as conn:  # the checkpoints kept (the last among them) are whole
        models = dict(
            conn.execute(
                sa.text(
                    f"SELECT iteration, sum(octet_length(data)) FROM {SCHEMA}.checkpoints "
                    "WHERE run_id = :r AND part = 'weights' GROUP BY iteration"
                ),
                {"r": run_id},
            ).all()
        )
    assert iterations in models and set(models.values()) == {size}


def _finish(db, run_id: int) -> None:
    resumed = estimator(db).fit(TABLE, resume=run_id)
    assert [r["iteration"] for r in resumed.history_] == list(range(1, ITERATIONS + 1))
    assert runs.load_run(db, run_id).status == "finished"
    _intact(db, run_id, ITERATIONS)


@pytest.mark.slow
def test_a_server_restart_between_iterations_fails_the_fit_and_it_resumes(cluster, db):
    est = estimator(db)
    fitting, raised = started(est.fit, TABLE)
    _wait(lambda: hasattr(est, "run_id_") and _stored(db, est.run_id_), "iteration 1 stored")
    with db.connect() as hold:
        # The next iteration trains, then waits to store its row: restart the server there.
        hold.exec_driver_sql(f"LOCK TABLE {SCHEMA}.run_iterations IN ACCESS EXCLUSIVE MODE")
        _wait(
            lambda: _activity(
                db,
                "wait_event_type = 'Lock' AND query LIKE 'INSERT INTO %run_iterations%'",
            ),
            "an iteration waiting to store its row",
        )
        embedded.stop(cluster)
        embedded.start(cluster)
        hold.invalidate()
    fitting.join(180)
    assert not fitting.is_alive()
    (error,) = raised
    assert isinstance(error, gpcnn.TrainingError), repr(error)
    assert "was terminated" in str(error) and "a server restart" in str(error)
    done = len(_stored(db, est.run_id_))
    assert 1 <= done < ITERATIONS
    assert f"fit(table, resume={est.run_id_})" in str(error)
    _intact(db, est.run_id_, done)
    _finish(db, est.run_id_)


@pytest.mark.slow
def test_a_client_killed_mid_iteration_leaves_a_run_that_resumes(cluster, db, tmp_path):
    child = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).parent / "children" / "fit.py"),
            cluster.url(),
            SCHEMA,
            TABLE,
            str(tmp_path / "weights.npy"),
            f"{__name__}:estimator",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},  # this gpcnn
    )
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()[-3000:]
        child.stdin.write("go\n")
        child.stdin.flush()
        name = f"gpcnn/{child.pid}"

        def training_after_a_stored_iteration():
            with db.connect() as conn:
                run_id = conn.execute(
                    sa.text(
                        f"SELECT max(r.run_id) FROM {SCHEMA}.runs r JOIN {SCHEMA}.run_iterations i "
                        "ON i.run_id = r.run_id WHERE r.status = 'running'"
                    )
                ).scalar()
            training = "application_name = :n AND state = 'active' AND query LIKE '%.train(%'"
            return run_id if run_id and _activity(db, training, n=name) else None

        run_id = _wait(training_after_a_stored_iteration, "the child training after iteration 1")
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        child.kill()
    assert child.returncode == -signal.SIGKILL
    assert runs.load_run(db, run_id).status == "running"  # nobody could say otherwise
    _intact(db, run_id, len(_stored(db, run_id)))
    _finish(db, run_id)
    assert json.dumps(runs.show_run(db, run_id)["history"])  # readable whole


@pytest.fixture(scope="module")
def handles(db, cluster):
    """The module's handle and one in the other dispatch mode (one statement for all segments,
    as on Greenplum; see conftest), on the same cluster."""
    statement = gpcnn.connect(cluster.url(), schema=SCHEMA, dispatch="statement")
    yield {"native": db, "statement": statement}
    statement.close()


@pytest.fixture
def lazy_wal_writer(db):
    """Commits that nobody waits for reach the disk only after 10 s (the WAL writer's longest
    delay; the server's default is 200 ms), with ``synchronous_commit`` off as on the embedded
    cluster, for the test's duration: a crash in that time loses every such commit, so what
    survives one is what gpcnn waited for. Issue 50: with the defaults, 2 of 3 kills lost the
    iteration stored last, up to every iteration of a fresh run ("run 3 stored no iteration yet"
    after the recovery)."""

    def settings(delay: str, commit: str) -> None:
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"ALTER SYSTEM SET wal_writer_delay = {delay}")
            conn.exec_driver_sql(f"ALTER SYSTEM SET synchronous_commit = {commit}")
            conn.exec_driver_sql("SELECT pg_reload_conf()")

    settings("'10s'", "off")
    yield
    settings("DEFAULT", "DEFAULT")


def _accepting(db) -> bool:
    try:
        with db.connect() as conn:
            return conn.exec_driver_sql("SELECT NOT pg_is_in_recovery()").scalar()
    except sa.exc.DBAPIError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("dispatch", ["native", "statement"])
@pytest.mark.usefixtures("lazy_wal_writer")
def test_a_segment_backend_killed_mid_iteration_is_named_alone_and_the_run_resumes(
    handles, dispatch, capfd
):
    """SIGKILL on a segment's server process (the OOM killer's way): PostgreSQL ends every other
    backend and recovers. The fit fails naming the killed process, with nothing else printed
    (psycopg2 printed a SystemError trace for each other session), and resumes once
    the server accepts connections again."""
    db = handles[dispatch]
    est = estimator(db)
    fitting, raised = started(est.fit, TABLE)

    def fitting_and(condition):
        def check():
            assert not raised, raised  # a fit that failed before the kill: its error, now
            found = condition()
            assert found or fitting.is_alive(), "the fit finished before it could be killed"
            return found

        return check

    stored = len(
        _wait(
            fitting_and(lambda: hasattr(est, "run_id_") and _stored(db, est.run_id_)),
            "iteration 1 stored",
        )
    )
    # A session's own process (the one a client can name): not a parallel worker, and not this
    # query's, whose text matches too.
    training = (
        "application_name = :n AND state = 'active' AND query LIKE '%.train(%' "
        "AND leader_pid IS NULL AND pid <> pg_backend_pid()"
    )
    name = f"gpcnn/{os.getpid()}"

    def training_pid():
        # A new transaction each time: pg_stat_activity is a snapshot per transaction, so one
        # held open would never see a statement that began after its first look.
        with db.connect() as conn:
            query = sa.text(f"SELECT max(pid) FROM pg_stat_activity WHERE {training}")
            return conn.execute(query, {"n": name}).scalar()

    pid = _wait(fitting_and(training_pid), "a training statement")
    os.kill(pid, signal.SIGKILL)
    fitting.join(180)
    assert not fitting.is_alive()
    (error,) = raised
    assert isinstance(error, gpcnn.TrainingError), repr(error)
    message = str(error)
    assert f"its server process (pid {pid}) was terminated" in message, message
    assert f"fit(table, resume={est.run_id_})" in message
    assert capfd.readouterr().err == ""  # verbose=0: no log lines either
    _wait(lambda: _accepting(db), "the server accepting connections after its recovery")
    # Its status says "running" or "failed": recording the failure races the server's recovery.
    assert _stored(db, est.run_id_)[:stored] == list(range(1, stored + 1))  # what was stored stays
    _intact(db, est.run_id_, len(_stored(db, est.run_id_)))
    _finish(db, est.run_id_)
    assert capfd.readouterr().err == ""
